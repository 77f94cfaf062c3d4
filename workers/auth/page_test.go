package auth

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/wire"
)

// pageMaxPayload is the max payload of the paging tests' server.
const pageMaxPayload = 64 << 10

// pagedProviders is how many providers the paging tests put in the vault:
// with long names, far more than one 64 KiB answer holds in either codec.
const pagedProviders = 900

// A vault with more providers than one answer holds, on a 64 KiB server:
// status and list_providers answer in pages, and paging with after gets
// every provider exactly once, in order, in both codecs.
func TestPagedProviders(t *testing.T) {
	t.Parallel()
	env := newEnv("ANTHROPIC_API_KEY", "sk-env", "III_ZZ_LAST_API_KEY", "zz-key")
	f := newFixtureOn(t, enginetest.RunServer(t, enginetest.WithMaxPayload(pageMaxPayload)), env, nil,
		WithProviders("vllm", "zz-last", "mm-unset"))
	ctx := ctxT(t)

	vault := make(map[string]agent.Credential, pagedProviders)
	for i := range pagedProviders {
		p := fmt.Sprintf("p%04d-%s", i, strings.Repeat("x", 100))
		c := agent.Credential{Type: agent.CredentialAPIKey, Key: fmt.Sprintf("key-%d", i)}
		if i%3 == 0 {
			c = agent.Credential{Type: agent.CredentialOAuth, AccessToken: fmt.Sprintf("at-%d", i), RefreshToken: "rt", ExpiresAt: testNow.UnixMilli() + int64(i)}
		}
		vault[p] = c
	}
	if err := f.store.Vault().write(vault); err != nil {
		t.Fatal(err)
	}
	all := append(slices.Collect(maps.Keys(vault)), "anthropic", "openai", "vllm", "zz-last", "mm-unset")
	slices.Sort(all)
	var configured []string // those with a credential: status leaves the others out
	for _, p := range all {
		if _, ok := vault[p]; ok || p == "anthropic" || p == "zz-last" {
			configured = append(configured, p)
		}
	}

	// A pageFn asks for one page after the cursor in codec and returns its
	// providers and whether it is truncated.
	type pageFn func(codec wire.Codec, after string) (names []string, truncated bool, err error)
	call := func(fn string, req any, resp any, codec wire.Codec) error {
		body, err := codec.Marshal(req)
		if err != nil {
			return err
		}
		raw, rc, err := f.e.TriggerRaw(ctx, fn, body, codec)
		if err != nil {
			return err
		}
		if len(raw) > pageMaxPayload {
			return fmt.Errorf("%s answered %d bytes", fn, len(raw))
		}
		return rc.Unmarshal(raw, resp)
	}
	statusPage := func(codec wire.Codec, after string) ([]string, bool, error) {
		var r StatusResponse
		if err := call(StatusFunction, StatusRequest{After: after}, &r, codec); err != nil {
			return nil, false, err
		}
		var names []string
		for _, st := range r.Providers {
			names = append(names, st.Provider)
			if want := statusOf(t, vault, st.Provider); want != "" && want != st.Fingerprint {
				return nil, false, fmt.Errorf("status %s fingerprint %s, want %s", st.Provider, st.Fingerprint, want)
			}
		}
		return names, r.Truncated, nil
	}
	listPage := func(codec wire.Codec, after string) ([]string, bool, error) {
		var r ListProvidersResponse
		if err := call(ListProvidersFunction, ListProvidersRequest{After: after}, &r, codec); err != nil {
			return nil, false, err
		}
		var names []string
		for _, pi := range r.Providers {
			names = append(names, pi.Provider)
			_, inVault := vault[pi.Provider]
			if inVault && !pi.Configured || pi.Provider == "mm-unset" && pi.Configured {
				return nil, false, fmt.Errorf("list_providers %s configured=%v", pi.Provider, pi.Configured)
			}
		}
		return names, r.Truncated, nil
	}

	wholeStatus, err := f.store.Status("")
	if err != nil {
		t.Fatal(err)
	}
	wholeList, err := f.store.ListProviders()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		page  pageFn
		codec wire.Codec
		want  []string
		whole any // the unpaged answer, which must not fit
	}{
		{"status/json", statusPage, wire.JSON, configured, wholeStatus},
		{"status/msgpack", statusPage, wire.Msgpack, configured, wholeStatus},
		{"list_providers/json", listPage, wire.JSON, all, wholeList},
		{"list_providers/msgpack", listPage, wire.Msgpack, all, wholeList},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if b, err := tt.codec.Marshal(map[string]any{"providers": tt.whole}); err != nil || len(b) <= pageMaxPayload {
				t.Fatalf("the whole answer is %d bytes (%v): the test needs more than %d", len(b), err, pageMaxPayload)
			}
			var got []string
			after, prev, pages := "", "", 0
			for {
				names, truncated, err := tt.page(tt.codec, after)
				if err != nil {
					t.Fatalf("page %d after %q: %v", pages, after, err)
				}
				pages++
				if len(names) == 0 && truncated {
					t.Fatalf("page %d after %q: empty and truncated", pages, after)
				}
				for _, n := range names {
					if n <= prev {
						t.Fatalf("page %d after %q: %q is not after %q", pages, after, n, prev)
					}
					prev = n
				}
				got = append(got, names...)
				if !truncated {
					break
				}
				if pages > len(tt.want) {
					t.Fatalf("%d pages for %d providers: paging does not move on", pages, len(tt.want))
				}
				after = names[len(names)-1]
			}
			t.Logf("%d providers in %d pages", len(got), pages)
			if pages < 2 {
				t.Fatalf("one page of %d providers; want it truncated", len(got))
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("paged %d providers in %d pages, want every one of %d exactly once, in order:\ngot  %.200v\nwant %.200v", len(got), pages, len(tt.want), got, tt.want)
			}
			// Past the end: nothing, not truncated.
			if names, truncated, err := tt.page(tt.codec, "zzzz"); err != nil || len(names) != 0 || truncated {
				t.Fatalf("after the last = %v, %v, %v; want none", names, truncated, err)
			}
		})
	}

	// One provider is still one answer, not paged.
	st, err := status(ctx, f.e, configured[len(configured)/2])
	if err != nil || len(st) != 1 || st[0].Provider != configured[len(configured)/2] {
		t.Fatalf("status of one = %+v, %v", st, err)
	}
	// A bad cursor is invalid_payload.
	for _, req := range []struct {
		fn  string
		req any
	}{
		{StatusFunction, StatusRequest{After: "no way"}},
		{StatusFunction, StatusRequest{After: strings.Repeat("a", agent.MaxIDLen+1)}},
		{StatusFunction, StatusRequest{Provider: "anthropic", After: "a"}},
		{ListProvidersFunction, ListProvidersRequest{After: "a/b"}},
		{ListProvidersFunction, ListProvidersRequest{After: "é"}},
	} {
		if err := f.e.Trigger(ctx, req.fn, req.req, nil); !errors.Is(err, wire.ErrInvalidPayload) {
			t.Errorf("%s %+v = %v, want invalid_payload", req.fn, req.req, err)
		}
	}
}

// statusOf is the fingerprint status should report for a vault provider,
// "" for one from elsewhere.
func statusOf(t *testing.T, vault map[string]agent.Credential, p string) string {
	t.Helper()
	c, ok := vault[p]
	if !ok {
		return ""
	}
	return Fingerprint(c)
}
