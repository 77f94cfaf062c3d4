// Package httpgw is the HTTP trigger gateway: an http.Handler that turns
// HTTP requests into function calls on the bus, by routes {method, path,
// function_id}.
//
// # Routes
//
// Routes live in the KV bucket [subjects.HTTPRoutesBucket]
// ("iii-http-routes"), one key per route shape, so two routes that would
// match the same requests cannot both be stored: the second is a conflict.
// Every [Gateway] watches the bucket, so any number of replicas behind a
// load balancer serve the same routes and pick up changes live. A watch
// that ends, or a bucket deleted and created again under it (`nats kv
// rm`/`add`, a restore; checked every 5s), is opened again with backoff,
// and the bucket's contents then replace the routes served; while the
// bucket is gone the routes are served as they were. Routes are
// added with [Gateway.AddRoute] or the functions http::add_route,
// http::remove_route and http::list_routes that [Serve] registers. Paths
// take ":name" parameters and a trailing "*name" wildcard; the most
// specific route wins ([Route]). http::list_routes {after?} answers the
// routes by path and method that fit the max payload, with truncated set
// when more follow (ask again with after, the last route).
//
// # Requests and responses
//
// A matched request calls the route's function (a synchronous trigger in
// the engine's codec) with a [Request]
//
//	{"method":"POST","path":"/users/42","route":"/users/:id","path_params":{"id":"42"},
//	 "query":{"verbose":["1"]},"headers":{"content-type":["application/json"],...},
//	 "body":"{\"name\":\"ada\"}"}
//
// where a textual body (JSON, text/*, form, XML, or no Content-Type) that
// is UTF-8 is a string and any other body is base64 with "body_base64":
// true. Path parameters are decoded but not cleaned: a "*rest" route
// passes "../../etc/passwd" as it came, and a function that maps them
// onto files confines them itself. Every request header but the hop-by-hop
// ones reaches the function, Authorization, Cookie and Accept included:
// the gateway authenticates nobody and negotiates nothing. OPTIONS is
// routed like any method (no automatic CORS answer). The function answers
// a [Response] {status_code, headers, body}. A body without a Content-Type
// gets the one of its kind (text/plain; charset=utf-8 for a string,
// application/octet-stream for bytes or base64, application/json for any
// other value), never a sniffed one, and every response says
// X-Content-Type-Options: nosniff: a function that echoes user input is not
// served as HTML unless it says so.
//
// Status codes the gateway produces itself, each with the JSON error
// envelope {"error":{"code",...}} as body:
//
//   - 404 no route matches the path; 405 (with Allow) a route matches the
//     path but not the method;
//   - 413 the body exceeds [WithMaxBodyBytes] (default 1 MiB) or the encoded
//     request, with the trace headers it carries, exceeds the NATS max
//     payload; nothing is sent;
//   - 408 the body did not arrive within [WithBodyTimeout] (default 30 s),
//     which also bounds the unread body of a request answered early (a
//     404 waits for the body the client announced at most that long, then
//     its connection is closed);
//   - 400 a malformed path escape or query string, or a path, query or
//     header value that is not UTF-8 once decoded;
//   - the function's error code mapped by [StatusFor]: invalid_payload 400,
//     budget_exceeded 402, forbidden 403, not_found 404, conflict and
//     not_pending 409, internal 500 (and any code outside the catalog),
//     function_not_found 502, canceled and unavailable 503, timeout 504;
//   - 504 the function did not answer within [WithTimeout] (default 30 s);
//   - 502 the reply is not a valid response (status outside 200-599, bad
//     header, bad base64).
//
// The gateway bounds the body, the function call, the reply and the
// writing of the response ([WithWriteTimeout], default 60 s from the
// response's start: a client that stops reading has its connection closed
// and holds no handler; the gateway streams nothing, so no response is
// meant to take longer); the http.Server it is mounted on must bound the
// rest: ReadHeaderTimeout (slow headers) and IdleTimeout (idle keep-alive
// connections). It needs no ReadTimeout or WriteTimeout, which would count
// the function's time too.
//
// Trace context: an incoming W3C traceparent/tracestate/baggage is the
// parent of the gateway's server span, which the NATS request carries on to
// the function, except the baggage members under "iii." (iii.session.id,
// iii.message.id): they name the session whose sandbox and files a tool
// works on (engine.SessionFromContext), which no HTTP client may choose.
//
// Lifecycle: New → serve HTTP → Close.
//
//	gw, err := httpgw.New(ctx, e)
//	if err != nil { ... }
//	defer gw.Close(ctx)
//	err = gw.AddRoute(ctx, httpgw.Route{Method: "GET", Path: "/users/:id", FunctionID: "users::get"})
//	http.ListenAndServe(":8080", gw)
package httpgw
