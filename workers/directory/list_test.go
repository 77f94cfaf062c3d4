package directory_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers/directory"
)

// A skills list larger than the server's max payload comes in pages
// (truncated, then after), in both codecs, instead of failing as a whole.
func TestListOutgrowsOneMessage(t *testing.T) {
	t.Parallel()
	const n = 300
	dir := t.TempDir()
	files := manySkills(n)
	writeSkills(t, dir, files)
	var want []string
	for rel := range files {
		want = append(want, strings.TrimSuffix(rel, ".md"))
	}
	slices.Sort(want)
	ns := enginetest.RunServer(t, enginetest.WithMaxPayload(32<<10))
	e := enginetest.NewEngine(t, ns)
	startWorker(t, e, directory.NewWorker(directory.WithDir(dir)))
	ctx := t.Context()

	for _, codec := range []wire.Codec{wire.Msgpack, wire.JSON} {
		t.Run(codec.ContentType(), func(t *testing.T) {
			var got []string
			req := directory.ListRequest{}
			for pages := 1; ; pages++ {
				body, err := codec.Marshal(req)
				if err != nil {
					t.Fatal(err)
				}
				raw, rc, err := e.TriggerRaw(ctx, directory.ListFunction, body, codec)
				if err != nil {
					t.Fatalf("page %d: %v", pages, err)
				}
				var resp directory.ListResponse
				if err := rc.Unmarshal(raw, &resp); err != nil {
					t.Fatal(err)
				}
				for _, s := range resp.Skills {
					if s.ID != "directory/overview" && !strings.HasPrefix(s.ID, "directory/directory::") {
						got = append(got, s.ID)
					}
				}
				if !resp.Truncated {
					if pages < 3 {
						t.Errorf("%d pages, want the list cut by the max payload", pages)
					}
					break
				}
				if len(resp.Skills) == 0 || pages > n {
					t.Fatalf("page %d: truncated with %d skills", pages, len(resp.Skills))
				}
				req.After = resp.Skills[len(resp.Skills)-1].ID
			}
			if !slices.Equal(got, want) {
				t.Fatalf("paged %d skills, want %d in order", len(got), len(want))
			}
		})
	}

	// A filter pages the same way; a link is accepted as the cursor.
	resp, err := engine.Call[directory.ListResponse](ctx, e, directory.ListFunction,
		directory.ListRequest{Worker: "beta", After: "iii://beta/tool::op-297"})
	if err != nil || len(resp.Skills) != 1 || resp.Skills[0].ID != "beta/tool::op-299" || resp.Truncated {
		t.Errorf("beta after op-297: %+v, %v", resp, err)
	}
	for _, after := range []string{"beta", "a.b/x", "beta/"} {
		if _, err := engine.Call[directory.ListResponse](ctx, e, directory.ListFunction, directory.ListRequest{After: after}); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("after %q: err = %v, want invalid_payload", after, err)
		}
	}
}

// An index larger than the server's max payload is answered cut to fit
// (truncated): first without the workers' overviews, then with the
// markdown cut after a whole line and a note, never failing as a whole
// (a run's system prompt would go without any index).
func TestIndexOutgrowsOneMessage(t *testing.T) {
	t.Parallel()
	bigOverview := "---\ntype: overview\ndescription: Big.\n---\n" + strings.Repeat("Overview text.\n", 1000) // 15 KB
	for _, c := range []struct {
		name      string
		files     map[string]string
		cutMD     bool // the markdown is cut too
		truncated bool
	}{
		{"fits", map[string]string{"alpha/overview.md": "An overview.", "alpha/a::b.md": "A skill."}, false, false},
		{"overviews shed", map[string]string{
			"alpha/overview.md": bigOverview, "beta/overview.md": bigOverview, "gamma/overview.md": bigOverview,
			"alpha/a::b.md": "A skill.",
		}, false, true},
		{"markdown cut", manySkills(300), true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeSkills(t, dir, c.files)
			ns := enginetest.RunServer(t, enginetest.WithMaxPayload(32<<10))
			e := enginetest.NewEngine(t, ns)
			w := directory.NewWorker(directory.WithDir(dir))
			startWorker(t, e, w)
			var full directory.Index
			enginetest.Eventually(t, waitFor, func() error { // the worker's own skills are in
				if full = w.Directory().Index(); !strings.Contains(full.Markdown, "iii://directory/overview") {
					return errors.New("directory/overview not indexed yet")
				}
				return nil
			})
			for _, codec := range []wire.Codec{wire.Msgpack, wire.JSON} {
				body, err := codec.Marshal(directory.IndexRequest{})
				if err != nil {
					t.Fatal(err)
				}
				raw, rc, err := e.TriggerRaw(t.Context(), directory.IndexFunction, body, codec)
				if err != nil {
					t.Fatalf("%s: %v", codec.ContentType(), err)
				}
				var idx directory.Index
				if err := rc.Unmarshal(raw, &idx); err != nil {
					t.Fatal(err)
				}
				if idx.Truncated != c.truncated || len(idx.Workers) != len(full.Workers) {
					t.Fatalf("%s: truncated %v, %d workers; want %v, %d", codec.ContentType(), idx.Truncated, len(idx.Workers), c.truncated, len(full.Workers))
				}
				for i, wi := range idx.Workers {
					if wi.Worker != full.Workers[i].Worker || (!c.truncated && wi.Overview != full.Workers[i].Overview) || (c.truncated && wi.Overview != "") {
						t.Errorf("%s: worker %d = %s overview %d bytes", codec.ContentType(), i, wi.Worker, len(wi.Overview))
					}
				}
				if !c.cutMD {
					if idx.Markdown != full.Markdown {
						t.Errorf("%s: markdown differs from the full index", codec.ContentType())
					}
					continue
				}
				kept, ok := strings.CutSuffix(idx.Markdown, directory.IndexTruncatedNote)
				if !ok || !strings.HasPrefix(full.Markdown, kept) || !strings.HasSuffix(kept, "\n") || len(kept) < 10<<10 {
					t.Errorf("%s: markdown is not a whole-line prefix of the index and the note (%d of %d bytes kept)", codec.ContentType(), len(kept), len(full.Markdown))
				}
			}
		})
	}
}

// manySkills is n skill files of two workers, each summary ~500 bytes.
func manySkills(n int) map[string]string {
	files := map[string]string{}
	for i := range n {
		worker := []string{"alpha", "beta"}[i%2]
		files[fmt.Sprintf("%s/tool::op-%03d.md", worker, i)] = "---\ntitle: " + strings.Repeat("T", 150) + "\ndescription: " + strings.Repeat("d", 190) + "\n---\nbody\n"
	}
	return files
}

// writeSkills writes files (path relative to dir → document) under dir.
func writeSkills(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, doc := range files {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
