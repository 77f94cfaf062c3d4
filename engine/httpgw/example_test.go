package httpgw_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/httpgw"
)

func Example() {
	dir, _ := os.MkdirTemp("", "httpgw-example")
	defer os.RemoveAll(dir)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(5 * time.Second) {
		fmt.Println("server not ready")
		return
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	e, _ := engine.New(nc)
	ctx := context.Background()
	defer e.Close(ctx)

	// A function that greets whoever the path names.
	w, _ := e.Worker("greeter")
	_ = w.Register(engine.Function{ID: "greet::hello", Handler: engine.Typed(
		func(_ context.Context, r httpgw.Request) (httpgw.Response, error) {
			return httpgw.Response{
				Headers: map[string][]string{"Content-Type": {"text/plain"}},
				Body:    fmt.Sprintf("hello, %s (%s)", r.PathParams["name"], r.Query.Get("lang")),
			}, nil
		})})

	gw, err := httpgw.New(ctx, e)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer gw.Close(ctx)
	if err := gw.AddRoute(ctx, httpgw.Route{Method: "GET", Path: "/hello/:name", FunctionID: "greet::hello"}); err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(gw)
	defer srv.Close()

	for _, path := range []string{"/hello/ada?lang=en", "/goodbye"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	// Output:
	// 200 hello, ada (en)
	// 404 {"error":{"code":"not_found","message":"no route for GET /goodbye","retryable":false}}
}
