package directory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

const waitFor = 5 * time.Second

func openDirectory(t *testing.T, e *engine.Engine, opts ...Option) *Directory {
	t.Helper()
	d, err := Open(testCtx(t), e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return d
}

// A worker written as a plain NATS client (no engine) publishes a skill
// with a KV put: it shows in get, list and index, follows updates, and
// goes away with a delete or a purge.
func TestPlainClientPublishes(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	logger, logs := newLogger()
	d := openDirectory(t, e, WithLogger(logger))
	ctx := testCtx(t)

	js, err := jetstream.New(enginetest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "iii-skills")
	if err != nil {
		t.Fatal(err)
	}
	const key = "sandbox.fs=3A=3Aread" // subjects.SkillKey("sandbox", "fs::read")
	if k, _ := subjects.SkillKey("sandbox", "fs::read"); k != key {
		t.Fatalf("SkillKey = %q", k)
	}
	if _, err := kv.Put(ctx, key, []byte("---\ntitle: Read a file\nowner: ops\n---\nReads a file of the sandbox. Paths are relative.\n")); err != nil {
		t.Fatal(err)
	}
	var got Skill
	enginetest.Eventually(t, waitFor, func() (err error) {
		got, err = d.Get("iii://sandbox/fs::read")
		return err
	})
	want := Skill{
		Summary: Summary{
			ID: "sandbox/fs::read", Link: "iii://sandbox/fs::read", Worker: "sandbox", Title: "Read a file",
			Type: TypeFunction, FunctionID: "fs::read", Description: "Reads a file of the sandbox.",
		},
		Body: "Reads a file of the sandbox. Paths are relative.\n", Source: SourcePublished,
	}
	if got != want {
		t.Fatalf("get:\n got %+v\nwant %+v", got, want)
	}
	if plain, err := d.Get("sandbox/fs::read"); err != nil || plain != want {
		t.Fatalf("get by plain id: %+v %v", plain, err)
	}
	list, err := d.List("", "")
	if err != nil || len(list) != 1 || list[0] != want.Summary {
		t.Fatalf("list: %+v %v", list, err)
	}
	idx := d.Index()
	if len(idx.Workers) != 1 || idx.Workers[0].Worker != "sandbox" ||
		!strings.Contains(idx.Markdown, "- [Read a file](iii://sandbox/fs::read): Reads a file of the sandbox.\n") {
		t.Fatalf("index: %+v", idx)
	}

	// An update replaces it.
	if _, err := kv.Put(ctx, key, []byte("Version two.")); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, waitFor, func() error {
		if s, err := d.Get("sandbox/fs::read"); err != nil || s.Body != "Version two." || s.Title != "fs::read" {
			return fmt.Errorf("after update: %+v %v", s, err)
		}
		return nil
	})

	// A malformed frontmatter is served as body.
	if _, err := kv.Put(ctx, key, []byte("---\ntitle: [\n---\nVersion three.")); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, waitFor, func() error {
		if s, err := d.Get("sandbox/fs::read"); err != nil || s.Body != "---\ntitle: [\n---\nVersion three." {
			return fmt.Errorf("malformed: %+v %v", s, err)
		}
		return nil
	})

	// Keys that are not skills, and empty values, are ignored.
	for k, v := range map[string]string{"not_a_skill": "x", "sandbox.fs=3A=3Awrite": ""} {
		if _, err := kv.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	kw, _ := subjects.SkillKey("sandbox", "fs::stat")
	if _, err := kv.Put(ctx, kw, []byte("Stats.")); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, waitFor, func() error {
		list, _ := d.List("", "")
		if len(list) != 2 || list[0].ID != "sandbox/fs::read" || list[1].ID != "sandbox/fs::stat" {
			return fmt.Errorf("list: %+v", list)
		}
		return nil
	})

	// A delete and a purge remove skills.
	if err := kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, kw); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, waitFor, func() error {
		if _, err := d.Get("sandbox/fs::read"); !errors.Is(err, wire.ErrNotFound) {
			return fmt.Errorf("deleted skill: %v", err)
		}
		if list, _ := d.List("", ""); len(list) != 0 {
			return fmt.Errorf("list: %+v", list)
		}
		return nil
	})
	if idx := d.Index(); idx.Markdown != "" || len(idx.Workers) != 0 {
		t.Fatalf("empty index: %+v", idx)
	}
	for _, sub := range [][]string{
		{"skill partly ignored", "sandbox/fs::read", "malformed frontmatter"},
		{"not <worker>/<function>", "not_a_skill"},
		{"size out of range", "sandbox/fs::write"},
	} {
		if n := logs.count(sub...); n != 1 {
			t.Errorf("log %v: %d times", sub, n)
		}
	}
}

// Skills already in the bucket (created by a plain client) are loaded
// when Open returns; deleted ones are not.
func TestOpenLoadsBucket(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	ctx := testCtx(t)
	js, err := jetstream.New(enginetest.Connect(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "iii-skills"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a.x", "a.y", "b.overview"} {
		if _, err := kv.Put(ctx, k, []byte("Skill "+k+".")); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "a.y"); err != nil {
		t.Fatal(err)
	}
	d := openDirectory(t, enginetest.NewEngine(t, ns))
	list, err := d.List("", "")
	if err != nil || len(list) != 2 || list[0].ID != "a/x" || list[1].ID != "b/overview" || list[1].Type != TypeOverview {
		t.Fatalf("list: %+v %v", list, err)
	}
	for _, tc := range []struct {
		worker, typ string
		ids         []string
	}{
		{"a", "", []string{"a/x"}},
		{"b", "", []string{"b/overview"}},
		{"", TypeOverview, []string{"b/overview"}},
		{"", TypeFunction, []string{"a/x"}},
		{"a", TypeOverview, nil},
		{"zzz", "", nil},
	} {
		got, err := d.List(tc.worker, tc.typ)
		if err != nil || got == nil || len(got) != len(tc.ids) {
			t.Errorf("List(%q, %q) = %+v, %v", tc.worker, tc.typ, got, err)
			continue
		}
		for i := range got {
			if got[i].ID != tc.ids[i] {
				t.Errorf("List(%q, %q) = %+v", tc.worker, tc.typ, got)
			}
		}
	}
	idx := d.Index()
	if len(idx.Workers) != 2 || idx.Workers[1].Overview != "Skill b.overview." || len(idx.Workers[1].Skills) != 0 {
		t.Fatalf("index: %+v", idx)
	}
}

// Folder skills are served, override published skills of the same id,
// follow edits, and give the published skill back when removed; entries
// that are not skills are ignored and logged once.
func TestFolderSkills(t *testing.T) {
	t.Parallel()
	ns := enginetest.RunServer(t)
	e := enginetest.NewEngine(t, ns)
	ctx := testCtx(t)
	dir := t.TempDir()
	for fn, doc := range map[string]string{"fs::read": "Published read.", "fs::write": "Published write."} {
		if err := e.PublishSkill(ctx, "sandbox", fn, doc); err != nil {
			t.Fatal(err)
		}
	}
	readPath := writeFile(t, dir, "sandbox/fs::read.md", "---\ntitle: Read (operator)\n---\nOperator read.\n")
	writeFile(t, dir, "ops/runbook.md", "---\ntype: guide\n---\nWhat to do when it breaks.\n")
	writeFile(t, dir, "ops/broken.md", "---\ntitle: [unclosed\n---\nStill served.\n")
	// Not skills: a bad worker folder, a bad name, hidden and other files.
	writeFile(t, dir, "bad.worker/x.md", "x")
	writeFile(t, dir, "sandbox/bad name.md", "x")
	writeFile(t, dir, "sandbox/.draft.md", "x")
	writeFile(t, dir, "sandbox/notes.txt", "x")
	writeFile(t, dir, "README.md", "x")
	writeFile(t, dir, "sandbox/empty.md", "")
	writeFile(t, dir, "sandbox/huge.md", strings.Repeat("x", engine.MaxSkillSize+1))

	logger, logs := newLogger()
	d := openDirectory(t, e, WithDir(dir), WithPollInterval(5*time.Millisecond), WithLogger(logger))
	if d.Dir() != dir {
		t.Fatalf("Dir = %q", d.Dir())
	}
	s, err := d.Get("sandbox/fs::read")
	if err != nil || s.Source != SourceFolder || s.Title != "Read (operator)" || s.Body != "Operator read.\n" {
		t.Fatalf("overridden: %+v %v", s, err)
	}
	if s, err := d.Get("sandbox/fs::write"); err != nil || s.Source != SourcePublished {
		t.Fatalf("published: %+v %v", s, err)
	}
	if s, err := d.Get("ops/runbook"); err != nil || s.Type != "guide" || s.FunctionID != "" || s.Description != "What to do when it breaks." {
		t.Fatalf("guide: %+v %v", s, err)
	}
	if s, err := d.Get("ops/broken"); err != nil || !strings.HasPrefix(s.Body, "---\ntitle: [unclosed") || s.Title != "broken" {
		t.Fatalf("malformed frontmatter: %+v %v", s, err)
	}
	list, _ := d.List("", "")
	var ids []string
	for _, s := range list {
		ids = append(ids, s.ID)
	}
	if got := strings.Join(ids, " "); got != "ops/broken ops/runbook sandbox/fs::read sandbox/fs::write" {
		t.Fatalf("ids: %s", got)
	}

	// A published update does not beat the folder.
	if err := e.PublishSkill(ctx, "sandbox", "fs::read", "Published read, v2."); err != nil {
		t.Fatal(err)
	}
	// An edit is picked up.
	if err := os.WriteFile(readPath, []byte("Operator read, edited."), 0o644); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, waitFor, func() error {
		if s, err := d.Get("sandbox/fs::read"); err != nil || s.Body != "Operator read, edited." {
			return fmt.Errorf("after edit: %+v %v", s, err)
		}
		return nil
	})
	// A new worker folder is picked up.
	writeFile(t, dir, "web/fetch.md", "Fetches a page.")
	enginetest.Eventually(t, waitFor, func() error {
		_, err := d.Get("iii://web/fetch")
		return err
	})
	// Removing the file brings the published skill back, with its update.
	if err := os.Remove(readPath); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, waitFor, func() error {
		if s, err := d.Get("sandbox/fs::read"); err != nil || s.Source != SourcePublished || s.Body != "Published read, v2." {
			return fmt.Errorf("after remove: %+v %v", s, err)
		}
		return nil
	})

	// Each problem was logged once, although the folder was polled many
	// times since.
	for _, sub := range [][]string{
		{"not a worker name", "bad.worker"},
		{"not a function id", "bad name.md"},
		{"size out of range", "empty.md"},
		{"size out of range", "huge.md"},
		{"skill partly ignored", "ops/broken"},
	} {
		if n := logs.count(sub...); n != 1 {
			t.Errorf("log %v: %d times", sub, n)
		}
	}
	if n := logs.count("draft"); n != 0 {
		t.Errorf("hidden file logged %d times", n)
	}
}

// A folder that does not exist holds no skills until it appears.
func TestFolderAppearsLater(t *testing.T) {
	t.Parallel()
	e := enginetest.Engine(t)
	dir := filepath.Join(t.TempDir(), "skills")
	d := openDirectory(t, e, WithDir(dir), WithPollInterval(5*time.Millisecond))
	if list, err := d.List("", ""); err != nil || len(list) != 0 {
		t.Fatalf("list: %+v %v", list, err)
	}
	writeFile(t, dir, "w/f.md", "F.")
	enginetest.Eventually(t, waitFor, func() error {
		_, err := d.Get("w/f")
		return err
	})
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, waitFor, func() error {
		if _, err := d.Get("w/f"); !errors.Is(err, wire.ErrNotFound) {
			return fmt.Errorf("after folder removed: %v", err)
		}
		return nil
	})
}

// Bad ids and filters are invalid_payload; unknown skills not_found.
func TestDirectoryErrors(t *testing.T) {
	t.Parallel()
	d := openDirectory(t, enginetest.Engine(t))
	for _, id := range []string{"", "w", "iii://w", "w/", "w/a b", "a.b/c", "http://w/f"} {
		if _, err := d.Get(id); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("Get(%q) = %v", id, err)
		}
	}
	if _, err := d.Get("w/f"); !errors.Is(err, wire.ErrNotFound) {
		t.Errorf("Get unknown = %v", err)
	}
	for _, f := range [][2]string{{"a.b", ""}, {"", "a b"}, {"*", ""}, {"", ">"}} {
		if _, err := d.List(f[0], f[1]); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("List(%q, %q) = %v", f[0], f[1], err)
		}
	}
}

func TestOpenOptions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	if _, err := Open(ctx, nil); !errors.Is(err, engine.ErrInvalidOption) {
		t.Errorf("nil engine: %v", err)
	}
	e := enginetest.Engine(t)
	for _, opt := range []Option{WithPollInterval(0), WithPollInterval(2 * time.Hour), WithLogger(nil)} {
		if _, err := Open(ctx, e, opt); !errors.Is(err, engine.ErrInvalidOption) {
			t.Errorf("bad option: %v", err)
		}
	}
	// A context that ends before the load is unavailable.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Open(cctx, e); err == nil {
		t.Error("Open with a canceled context succeeded")
	}
	d, err := Open(ctx, e, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := d.Get("w/f"); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("closed directory stays readable: %v", err)
	}
}
