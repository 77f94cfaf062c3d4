package web_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/enginetest"
	"github.com/iii-on-nats/iii/workers/web"
)

// The worker on a node: a call of web::fetch reads a page and answers its
// text.
func Example() {
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, `<html><head><title>Hello</title><script>track()</script></head>
			<body><h1>Welcome</h1><p>Read   <a href="/docs">the docs</a>.</p></body></html>`)
	}))
	defer page.Close()
	x := enginetest.StartExample()
	defer x.Close()
	ctx := context.Background()

	// The page listens on loopback, which a fetcher refuses by default.
	w := web.NewWorker(web.WithAllowPrivate(true))
	if err := w.Start(ctx, x.Engine); err != nil {
		panic(err)
	}
	defer w.Close(ctx)

	res, err := engine.Call[web.FetchResponse](ctx, x.Engine, web.FetchFunction, web.FetchRequest{URL: page.URL})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, res.ContentType)
	fmt.Println(strings.ReplaceAll(res.Content, page.URL, "http://page"))
	// Output:
	// 200 text/html; charset=utf-8
	// Hello
	//
	// # Welcome
	//
	// Read [the docs](http://page/docs).
}

// A fetcher on its own refuses internal addresses, checked on the IP it
// would dial.
func ExampleFetcher_Fetch() {
	f, err := web.NewFetcher()
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	defer f.Close(ctx)
	for _, u := range []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://[::ffff:10.0.0.1]/",
		"file:///etc/passwd",
	} {
		_, err := f.Fetch(ctx, web.FetchRequest{URL: u})
		fmt.Println(err)
	}
	// Output:
	// forbidden: 169.254.169.254 is refused: link-local (169.254.0.0/16, home of the cloud metadata service); web::fetch reaches only public internet addresses
	// forbidden: ::ffff:10.0.0.1 is refused: IPv4-mapped private (RFC 1918, 10.0.0.0/8); web::fetch reaches only public internet addresses
	// invalid_payload: url: scheme "file" is not allowed: only http and https
}
