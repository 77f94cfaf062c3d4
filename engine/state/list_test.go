package state_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/engine/state"
)

// listPage asks state::list for one page.
func listPage(t testing.TB, nc *nats.Conn, scope, prefix, after string, limit int) state.ListResponse {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"scope": scope, "prefix": prefix, "after": after, "limit": limit})
	got, werr := jsonReq(t, nc, "iii.fn.state.list", string(body))
	if werr != nil {
		t.Fatalf("list %s: %v", body, werr)
	}
	var resp state.ListResponse
	if err := json.Unmarshal([]byte(got), &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// walk lists scope page by page and returns every key, checking that no
// page is empty while truncated.
func walk(t testing.TB, nc *nats.Conn, scope string, limit int, each func(state.Item)) []string {
	t.Helper()
	var keys []string
	after := ""
	for page := 0; ; page++ {
		resp := listPage(t, nc, scope, "", after, limit)
		if resp.Truncated && len(resp.Items) == 0 {
			t.Fatalf("page %d after %q: truncated and empty", page, after)
		}
		for _, it := range resp.Items {
			keys = append(keys, it.Key)
			if each != nil {
				each(it)
			}
		}
		if !resp.Truncated {
			return keys
		}
		after = resp.Items[len(resp.Items)-1].Key
	}
}

func outBytes(t testing.TB, ns *server.Server) int64 {
	t.Helper()
	vz, err := ns.Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	return vz.OutBytes
}

func outMsgs(t testing.TB, ns *server.Server) int64 {
	t.Helper()
	vz, err := ns.Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	return vz.OutMsgs
}

// TestFunctionsListPageCost: walking a scope page by page costs the server
// messages in proportion to the scope, not to the scope times the pages
// (each page used to read every value of the scope again).
func TestFunctionsListPageCost(t *testing.T) {
	t.Parallel()
	const keys, limit = 2000, 20
	v := newEnv(t, nil)
	serve(t, v)
	fillScope(t, v, "cost", keys)
	nc := enginetest.Connect(t, v.ns)
	before := outMsgs(t, v.ns)
	got := walk(t, nc, "cost", limit, nil)
	sent := outMsgs(t, v.ns) - before
	if len(got) != keys {
		t.Fatalf("walked %d keys, want %d", len(got), keys)
	}
	for i, k := range got {
		if want := fmt.Sprintf("k%06d", i); k != want {
			t.Fatalf("key %d is %q, want %q", i, k, want)
		}
	}
	// A page reads limit+1 values, plus a few requests and replies: about
	// 1.25 messages a key here, against 100 when every page read them all.
	if sent > 3*keys {
		t.Fatalf("a walk of %d pages over %d keys sent %d messages, want at most %d",
			keys/limit, keys, sent, 3*keys)
	}
}

// TestFunctionsListPagingChanges pages through a scope that changes
// between the pages: every page holds the items a fresh list would, after
// the cursor, in key order, with truncated set only when an item is left.
func TestFunctionsListPagingChanges(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil)
	serve(t, v)
	nc := enginetest.Connect(t, v.ns)
	ctx := testCtx(t)
	set := func(scope string, keys ...string) func() error {
		return func() error {
			for _, k := range keys {
				if _, _, err := v.store.Set(ctx, scope, k, k); err != nil {
					return err
				}
			}
			return nil
		}
	}
	del := func(keys ...string) func() error {
		return func() error {
			for _, k := range keys {
				if _, err := v.store.Delete(ctx, "p", k); err != nil {
					return err
				}
			}
			return nil
		}
	}
	many := make([]string, 40) // more than an index catches up with one by one
	for i := range many {
		many[i] = fmt.Sprintf("m%02d", i)
	}
	foreign := func() error { // a key no state key maps onto
		_, err := v.store.KeyValue().Put(ctx, "p.bad=zz", []byte("1"))
		return err
	}
	steps := []struct {
		name          string
		do            func() error
		prefix, after string
		limit         int
		want          string
		truncated     bool
	}{
		{"first page", set("p", "k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09", "k10"),
			"", "", 3, "k01 k02 k03", true},
		{"unchanged", nil, "", "k03", 3, "k04 k05 k06", true},
		{"new keys before and after the cursor", set("p", "k00", "k065"), "", "k06", 3, "k065 k07 k08", true},
		{"only deleted keys left", del("k09", "k10"), "", "k065", 2, "k07 k08", false},
		{"nothing left", nil, "", "k08", 2, "", false},
		{"many new keys and a foreign one", func() error {
			if err := set("p", many...)(); err != nil {
				return err
			}
			return foreign()
		}, "", "k08", 3, "m00 m01 m02", true},
		{"deleted key written again", set("p", "k09"), "", "k08", 1, "k09", true},
		{"writes in another scope", set("q", "a", "b"), "", "m37", 5, "m38 m39", false},
		{"after a key that does not exist", nil, "", "k0655", 2, "k07 k08", true},
		{"keys sort as strings, not as subjects", set("p", "e/x", "e-y", "e.z", "e=w", "e b"),
			"", "d", 5, "e b e-y e.z e/x e=w", true},
		{"prefix: the key and the keys below it", set("p", "e"), "e", "", 0, "e e/x", false},
		{"prefix: after the key itself", nil, "e", "e", 0, "e/x", false},
		{"prefix: only below", nil, "e/", "", 0, "e/x", false},
		{"prefix: nothing", nil, "zz", "", 0, "", false},
		{"limit 0: the rest", del(many[2:]...), "", "k065", 0, "k07 k08 k09 m00 m01", false},
	}
	for _, st := range steps {
		if st.do != nil {
			if err := st.do(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
		}
		resp := listPage(t, nc, "p", st.prefix, st.after, st.limit)
		var keys []string
		for _, it := range resp.Items {
			keys = append(keys, it.Key)
			if it.Value != it.Key || it.Revision == 0 {
				t.Errorf("%s: item %+v", st.name, it)
			}
		}
		if got := strings.Join(keys, " "); got != st.want || resp.Truncated != st.truncated {
			t.Fatalf("%s: keys %q truncated %v, want %q truncated %v", st.name, got, resp.Truncated, st.want, st.truncated)
		}
	}
}

// TestFunctionsListBucketRecreated: a page after the bucket was deleted
// and made again lists the new bucket's keys, whether it holds fewer or
// more messages than the old one did.
func TestFunctionsListBucketRecreated(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		keys int
	}{
		{"fewer messages", 2},
		{"more messages", 60},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, nil)
			serve(t, v)
			nc := enginetest.Connect(t, v.ns)
			ctx := testCtx(t)
			fillScope(t, v, "r", 50)
			if resp := listPage(t, nc, "r", "", "", 1); len(resp.Items) != 1 || resp.Items[0].Key != "k000000" {
				t.Fatalf("first page %+v", resp)
			}
			if err := v.e.JetStream().DeleteStream(ctx, "KV_"+v.store.Bucket()); err != nil {
				t.Fatal(err)
			}
			other := newStore(t, v.e)
			want := make([]string, tt.keys)
			for i := range want {
				want[i] = fmt.Sprintf("n%02d", i)
				if _, _, err := other.Set(ctx, "r", want[i], i); err != nil {
					t.Fatal(err)
				}
			}
			if got := walk(t, nc, "r", 25, nil); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("keys %v, want %v", got, want)
			}
		})
	}
}

// TestFunctionsListLargeValues: values adding up to more than one batch
// read returns (eight max payloads) still come complete and in order.
func TestFunctionsListLargeValues(t *testing.T) {
	t.Parallel()
	v := newEnv(t, []enginetest.ServerOption{enginetest.WithMaxPayload(64 << 10)})
	serve(t, v)
	nc := enginetest.Connect(t, v.ns)
	ctx := testCtx(t)
	const keys = 30
	// Written last key first: a batch read returns values in the order
	// they were written, so the first keys come last.
	for i := keys - 1; i >= 0; i-- {
		val := fmt.Sprintf("%02d", i) + strings.Repeat("x", v.store.MaxValueSize()-4)
		if _, _, err := v.store.Set(ctx, "big", fmt.Sprintf("k%02d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	walk(t, nc, "big", 0, func(it state.Item) {
		if want := fmt.Sprintf("k%02d", n); it.Key != want || it.ValueUnavailable ||
			!strings.HasPrefix(fmt.Sprint(it.Value), want[1:]) || it.Revision != uint64(keys-n) {
			t.Fatalf("item %d: key %q revision %d value %.8v, want %s", n, it.Key, it.Revision, it.Value, want)
		}
		n++
	})
	if n != keys {
		t.Fatalf("walked %d keys, want %d", n, keys)
	}
}

// TestFunctionsListPageBytes: a page reads about the values it holds. The
// server sends at most a few max payloads per page beside the reply (2.6
// at worst here), whatever the order the keys were written in; a page used
// to read every value of its batch (up to 64 keys) to return the few that
// fit (6.5 to 7.3 max payloads a page here).
func TestFunctionsListPageBytes(t *testing.T) {
	t.Parallel()
	const maxPayload = 64 << 10
	tests := []struct {
		name    string
		keys    int
		size    int  // bytes of each value; 0 is the largest value allowed
		reverse bool // written last key first: a batch read meets the last keys first
	}{
		{"small values", 150, 8 << 10, false},
		{"small values reverse", 150, 8 << 10, true},
		{"largest values reverse", 30, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, []enginetest.ServerOption{enginetest.WithMaxPayload(maxPayload)})
			serve(t, v)
			nc := enginetest.Connect(t, v.ns)
			ctx := testCtx(t)
			size := tt.size
			if size == 0 {
				size = v.store.MaxValueSize() - 2
			}
			for i := range tt.keys {
				if tt.reverse {
					i = tt.keys - 1 - i
				}
				if _, _, err := v.store.Set(ctx, "s", fmt.Sprintf("k%04d", i), strings.Repeat("x", size)); err != nil {
					t.Fatal(err)
				}
			}
			before := outBytes(t, v.ns)
			var pages, replies, items int
			after := ""
			for ; ; pages++ {
				body, _ := json.Marshal(map[string]any{"scope": "s", "after": after})
				got, werr := jsonReq(t, nc, "iii.fn.state.list", string(body))
				if werr != nil {
					t.Fatal(werr)
				}
				replies += len(got)
				var resp state.ListResponse
				if err := json.Unmarshal([]byte(got), &resp); err != nil {
					t.Fatal(err)
				}
				for _, it := range resp.Items {
					if want := fmt.Sprintf("k%04d", items); it.Key != want || it.ValueUnavailable {
						t.Fatalf("item %d is %q (value_unavailable %v), want %s", items, it.Key, it.ValueUnavailable, want)
					}
					items++
				}
				if !resp.Truncated {
					pages++
					break
				}
				after = resp.Items[len(resp.Items)-1].Key
			}
			if items != tt.keys {
				t.Fatalf("walked %d keys, want %d", items, tt.keys)
			}
			// What the server sent beside the replies: the values read for
			// the pages (and the requests, a few hundred bytes each).
			read := int(outBytes(t, v.ns)-before) - replies
			if limit := 4 * maxPayload * pages; read > limit {
				t.Fatalf("%d pages read %d bytes (%d per page), want at most 4 max payloads per page (%d)",
					pages, read, read/pages, limit)
			}
		})
	}
}
