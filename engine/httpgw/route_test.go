package httpgw

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/iii-on-nats/iii/engine/wire"
)

func TestCompileRoute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method, path     string
		wantMethod, norm string
		key              string
		params           []string
	}{
		{"GET", "/", "GET", "/", "GET", nil},
		{"get", "/users", "GET", "/users", "GET.users", nil},
		{"GET", "/users/", "GET", "/users", "GET.users", nil},
		{"POST", "/users/:id", "POST", "/users/:id", "POST.users.=3A", []string{"id"}},
		{"GET", "/users/:uid/posts/:pid", "GET", "/users/:uid/posts/:pid", "GET.users.=3A.posts.=3A", []string{"uid", "pid"}},
		{"GET", "/files/*rest", "GET", "/files/*rest", "GET.files.=2A", []string{"rest"}},
		{"*", "/any", "*", "/any", "_any.any", nil},
		{"M-SEARCH", "/x", "M-SEARCH", "/x", "M-SEARCH.x", nil},
		{"GET", "/a.b/c d/é", "GET", "/a.b/c d/é", "GET.a=2Eb.c=20d.=C3=A9", nil},
		{"GET", "/v1:batch", "GET", "/v1:batch", "GET.v1=3Abatch", nil},
		{"GET", "/=3A", "GET", "/=3A", "GET.=3D3A", nil}, // a literal never collides with a parameter
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			c, err := compileRoute(Route{Method: tt.method, Path: tt.path, FunctionID: "f::g"})
			if err != nil {
				t.Fatal(err)
			}
			if c.Method != tt.wantMethod || c.Path != tt.norm || c.key != tt.key || fmt.Sprint(c.params) != fmt.Sprint(tt.params) {
				t.Fatalf("got %s %s key %q params %v", c.Method, c.Path, c.key, c.params)
			}
		})
	}
}

func TestCompileRouteErrors(t *testing.T) {
	t.Parallel()
	tests := []Route{
		{Method: "GET", Path: "users", FunctionID: "f"},
		{Method: "GET", Path: "", FunctionID: "f"},
		{Method: "", Path: "/x", FunctionID: "f"},
		{Method: "GE T", Path: "/x", FunctionID: "f"},
		{Method: "GET/", Path: "/x", FunctionID: "f"},
		{Method: strings.Repeat("A", 33), Path: "/x", FunctionID: "f"},
		{Method: "GET", Path: "/x", FunctionID: ""},
		{Method: "GET", Path: "/x", FunctionID: "a::::b"},
		{Method: "GET", Path: "/x", FunctionID: "a b"},
		{Method: "GET", Path: "//x", FunctionID: "f"},
		{Method: "GET", Path: "/x//y", FunctionID: "f"},
		{Method: "GET", Path: "/x?y", FunctionID: "f"},
		{Method: "GET", Path: "/x#y", FunctionID: "f"},
		{Method: "GET", Path: "/x\ny", FunctionID: "f"},
		{Method: "GET", Path: "/x\xff", FunctionID: "f"},
		{Method: "GET", Path: "/:", FunctionID: "f"},
		{Method: "GET", Path: "/:1a", FunctionID: "f"},
		{Method: "GET", Path: "/:a-b", FunctionID: "f"},
		{Method: "GET", Path: "/*", FunctionID: "f"},
		{Method: "GET", Path: "/*rest/x", FunctionID: "f"},
		{Method: "GET", Path: "/:id/:id", FunctionID: "f"},
		{Method: "GET", Path: "/:id/*id", FunctionID: "f"},
		{Method: "GET", Path: "/" + strings.Repeat("x", MaxPathLen), FunctionID: "f"},
	}
	for _, r := range tests {
		t.Run(fmt.Sprintf("%q %q %q", r.Method, r.Path, r.FunctionID), func(t *testing.T) {
			err := r.Validate()
			if !errors.Is(err, wire.ErrInvalidPayload) || !errors.Is(err, ErrInvalidRoute) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

func mustTable(t testing.TB, routes ...string) *table {
	t.Helper()
	var cs []*compiled
	for _, r := range routes {
		m, p, _ := strings.Cut(r, " ")
		c, err := compileRoute(Route{Method: m, Path: p, FunctionID: "fn"})
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	return buildTable(cs)
}

func TestLookup(t *testing.T) {
	t.Parallel()
	tb := mustTable(t,
		"GET /",
		"GET /users",
		"GET /users/me",
		"GET /users/:id",
		"DELETE /users/:uid",
		"GET /users/:id/posts/:post",
		"GET /files/*path",
		"GET /files/special",
		"POST /files",
		"* /any/:x",
		"GET /any/:x",
		"GET /deep/:a/x",
		"GET /deep/*rest",
	)
	tests := []struct {
		method, path string
		want         string // route path, or "405 <allow>" / "404"
		params       map[string]string
	}{
		{"GET", "/", "/", nil},
		{"GET", "/users", "/users", nil},
		{"GET", "/users/", "/users", nil},
		{"GET", "/users/me", "/users/me", nil},
		{"GET", "/users/42", "/users/:id", map[string]string{"id": "42"}},
		{"GET", "/users/a%2Fb", "/users/:id", map[string]string{"id": "a/b"}},
		{"GET", "/users/h%C3%A9", "/users/:id", map[string]string{"id": "hé"}},
		// A literal route without the method does not hide the parameter route.
		{"DELETE", "/users/me", "/users/:uid", map[string]string{"uid": "me"}},
		{"GET", "/users/42/posts/7", "/users/:id/posts/:post", map[string]string{"id": "42", "post": "7"}},
		{"GET", "/files/a/b/c.txt", "/files/*path", map[string]string{"path": "a/b/c.txt"}},
		{"GET", "/files/special", "/files/special", nil},
		{"GET", "/files", "/files/*path", map[string]string{"path": ""}},
		{"POST", "/files", "/files", nil},
		{"HEAD", "/users/42", "/users/:id", map[string]string{"id": "42"}},
		{"PATCH", "/any/1", "/any/:x", map[string]string{"x": "1"}},
		{"GET", "/deep/1/x", "/deep/:a/x", map[string]string{"a": "1"}},
		{"GET", "/deep/1/y", "/deep/*rest", map[string]string{"rest": "1/y"}},
		{"GET", "/nope", "404", nil},
		{"GET", "/users/42/posts", "404", nil},
		{"GET", "/users//x", "404", nil},
		{"POST", "/users/42", "405 DELETE, GET, HEAD", nil},
		{"PUT", "/files", "405 GET, HEAD, POST", nil},
		{"POST", "/", "405 GET, HEAD", nil},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			u, err := url.Parse(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			segs, err := requestSegments(u)
			if err != nil {
				t.Fatal(err)
			}
			m := tb.lookup(tt.method, segs)
			got := "404"
			switch {
			case m.route != nil:
				got = m.route.Path
			case len(m.allow) > 0:
				got = "405 " + strings.Join(m.allow, ", ")
			}
			if got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			if m.route != nil && fmt.Sprint(m.params) != fmt.Sprint(orEmpty(tt.params)) {
				t.Fatalf("params %v, want %v", m.params, tt.params)
			}
		})
	}
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

var kvKeyRE = regexp.MustCompile(`^[-_=A-Za-z0-9]+(\.[-_=A-Za-z0-9]+)*$`)

// FuzzRoute: compiling never panics; a valid route has a valid KV key, its
// normal form compiles to the same key, and a request built from the
// pattern is routed to it.
func FuzzRoute(f *testing.F) {
	for _, s := range []string{"/", "/users/:id", "/files/*rest", "/a.b/c d/é", "//", "/:a/:a", "/x/", "/=3A", "/:x/y/*z"} {
		f.Add("GET", s)
	}
	f.Add("*", "/any")
	f.Fuzz(func(t *testing.T, method, path string) {
		c, err := compileRoute(Route{Method: method, Path: path, FunctionID: "f"})
		if err != nil {
			if !errors.Is(err, ErrInvalidRoute) {
				t.Fatalf("error %v does not wrap ErrInvalidRoute", err)
			}
			return
		}
		if !kvKeyRE.MatchString(c.key) {
			t.Fatalf("key %q of %q is not a KV key", c.key, path)
		}
		again, err := compileRoute(c.Route)
		if err != nil || again.key != c.key || again.Route != c.Route {
			t.Fatalf("normal form %+v does not recompile the same: %+v, %v", c.Route, again, err)
		}
		// Build a request path: literals escaped, parameters "v<i>".
		var b strings.Builder
		for i, s := range c.segs {
			b.WriteByte('/')
			if s.kind == segStatic {
				b.WriteString(url.PathEscape(s.text))
			} else {
				fmt.Fprintf(&b, "v%d", i)
			}
		}
		u, err := url.Parse(b.String() + "/")
		if err != nil {
			t.Fatalf("request %q: %v", b.String(), err)
		}
		segs, err := requestSegments(u)
		if err != nil {
			t.Fatal(err)
		}
		m := buildTable([]*compiled{c}).lookup(c.Method, segs)
		if m.route != c && c.Method != AnyMethod {
			t.Fatalf("%s %s does not route %q", c.Method, c.Path, u.EscapedPath())
		}
	})
}

// FuzzRender: any decoded reply renders or fails with errBadResponse.
func FuzzRender(f *testing.F) {
	f.Add(`{"status_code":201,"headers":{"x-a":"1","x-b":["2","3"]},"body":"hi"}`)
	f.Add(`{"body":{"ok":true}}`)
	f.Add(`{"body":"aGk=","body_base64":true}`)
	f.Add(`{"status_code":99}`)
	f.Add(`{"headers":{"bad name":"x"}}`)
	f.Add(`{"headers":{"content-type":""},"body":"<html>"}`)
	f.Fuzz(func(t *testing.T, s string) {
		var rr replyResponse
		if wire.JSON.Unmarshal([]byte(s), &rr) != nil {
			return
		}
		status, h, body, err := render(&rr)
		if err != nil {
			if !errors.Is(err, errBadResponse) {
				t.Fatalf("error %v does not wrap errBadResponse", err)
			}
			return
		}
		if status < 200 || status > 599 {
			t.Fatalf("status %d", status)
		}
		// Nothing is left for net/http or a browser to sniff.
		if len(body) > 0 && h.Get("Content-Type") == "" || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("headers %v for a body of %d bytes", h, len(body))
		}
	})
}

func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			var rs []string
			for i := 0; i < n; i++ {
				rs = append(rs, fmt.Sprintf("GET /svc%d/users/:id/posts/:post", i), fmt.Sprintf("POST /svc%d/files/*rest", i))
			}
			tb := mustTable(b, rs...)
			u, _ := url.Parse(fmt.Sprintf("/svc%d/users/42/posts/7", n/2))
			b.ReportAllocs()
			for b.Loop() {
				segs, _ := requestSegments(u)
				if m := tb.lookup("GET", segs); m.route == nil {
					b.Fatal("no match")
				}
			}
		})
	}
}
