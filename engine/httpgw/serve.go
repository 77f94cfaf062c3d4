package httpgw

import (
	"context"
	"fmt"
	"sort"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// Function ids [Serve] registers.
const (
	FnAddRoute    = "http::add_route"
	FnRemoveRoute = "http::remove_route"
	FnListRoutes  = "http::list_routes"
)

// RemoveRouteRequest is the request of http::remove_route.
type RemoveRouteRequest struct {
	Method string `json:"method"`
	Path   string `json:"path"`
}

// Validate checks the method and path.
func (r RemoveRouteRequest) Validate() error {
	_, err := compilePattern(r.Method, r.Path, "")
	return err
}

// RemoveRouteResponse is the reply of http::remove_route; Removed is false
// when there was no such route.
type RemoveRouteResponse struct {
	Removed bool `json:"removed"`
}

// ListRoutesRequest is the request of http::list_routes.
type ListRoutesRequest struct {
	// After continues a truncated list: the last route of the previous
	// answer (its method and path; function_id is ignored). Only routes
	// sorted after it, by path and method, are listed.
	After *Route `json:"after,omitempty"`
}

// Validate checks the cursor's method and path.
func (r ListRoutesRequest) Validate() error {
	if r.After == nil {
		return nil
	}
	_, err := compilePattern(r.After.Method, r.After.Path, "")
	return err
}

// ListRoutesResponse is the reply of http::list_routes.
type ListRoutesResponse struct {
	Routes []Route `json:"routes"`
	// Truncated says more routes follow than the max payload lets one
	// answer hold: ask again with After set to the last route.
	Truncated bool `json:"truncated,omitempty"`
}

// listHeadroom is kept free of the max payload for the reply's headers
// and the fields around the routes.
const listHeadroom = 1 << 10

// listPage is the page of routes (sorted by path and method) after r.After
// whose encoding in codec fits maxPayload; the first always goes in.
func listPage(routes []Route, r ListRoutesRequest, codec wire.Codec, maxPayload int64) (ListRoutesResponse, error) {
	if r.After != nil {
		c, err := compilePattern(r.After.Method, r.After.Path, "")
		if err != nil {
			return ListRoutesResponse{}, err
		}
		i := sort.Search(len(routes), func(i int) bool {
			return routes[i].Path > c.Path || routes[i].Path == c.Path && routes[i].Method > c.Method
		})
		routes = routes[i:]
	}
	out := ListRoutesResponse{Routes: make([]Route, 0, len(routes))}
	room := maxPayload - listHeadroom
	for _, rt := range routes {
		b, err := codec.Marshal(rt)
		if err != nil {
			return ListRoutesResponse{}, wire.Wrap(wire.CodeInternal, err, "route %s %s does not encode", rt.Method, rt.Path)
		}
		if room -= int64(len(b)) + 1; room < 0 && len(out.Routes) > 0 {
			out.Truncated = true
			break
		}
		out.Routes = append(out.Routes, rt)
	}
	return out, nil
}

// Serve starts the "http" worker with http::add_route {method, path,
// function_id} (→ the route in normal form), http::remove_route {method,
// path} (→ {removed}) and http::list_routes {after?} (→ {routes,
// truncated?}). They act on the routes bucket through gw, so every
// gateway follows. http::list_routes answers within the max payload: the
// routes by path and method that fit, with truncated set when more
// follow (ask again with after, the last route). ctx bounds the setup
// only.
func Serve(ctx context.Context, e *engine.Engine, gw *Gateway) (*engine.Worker, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if gw == nil {
		return nil, fmt.Errorf("%w: nil gateway", engine.ErrInvalidOption)
	}
	w, err := e.Worker("http", engine.WithDescription("iii HTTP trigger gateway: routes stored in KV, served by every gateway replica"))
	if err != nil {
		return nil, err
	}
	routeSchema := `{"type":"object","required":["method","path","function_id"],"properties":{` +
		`"method":{"type":"string","description":"GET, POST, ... or * for any"},` +
		`"path":{"type":"string","description":"/literal/:param/*rest"},"function_id":{"type":"string"}}}`
	fns := []engine.Function{
		{
			ID:             FnAddRoute,
			Description:    "Route HTTP requests with method on path (/users/:id, /files/*rest) to function_id, on every gateway. A route matching the same requests for another function is a conflict.",
			RequestSchema:  routeSchema,
			ResponseSchema: routeSchema,
			Idempotent:     true,
			Handler: engine.Typed(func(ctx context.Context, r Route) (Route, error) {
				if err := gw.AddRoute(ctx, r); err != nil {
					return Route{}, err
				}
				c, _ := compileRoute(r)
				return c.Route, nil
			}),
		},
		{
			ID:             FnRemoveRoute,
			Description:    "Remove the HTTP route with exactly this method and path pattern; removed is false when there was none.",
			RequestSchema:  `{"type":"object","required":["method","path"],"properties":{"method":{"type":"string"},"path":{"type":"string"}}}`,
			ResponseSchema: `{"type":"object","required":["removed"],"properties":{"removed":{"type":"boolean"}}}`,
			Idempotent:     true,
			Handler: engine.Typed(func(ctx context.Context, r RemoveRouteRequest) (RemoveRouteResponse, error) {
				removed, err := gw.RemoveRoute(ctx, r.Method, r.Path)
				return RemoveRouteResponse{Removed: removed}, err
			}),
		},
		{
			ID:          FnListRoutes,
			Description: "List the stored HTTP routes, sorted by path and method.",
			RequestSchema: `{"type":"object","properties":{"after":{"type":"object","required":["method","path"],` +
				`"properties":{"method":{"type":"string"},"path":{"type":"string"}},` +
				`"description":"continue a truncated answer: its last route"}}}`,
			ResponseSchema: `{"type":"object","required":["routes"],"properties":{"routes":{"type":"array","items":` + routeSchema + `},` +
				`"truncated":{"type":"boolean","description":"more routes follow: ask again with after, the last route"}}}`,
			Idempotent: true,
			Handler: func(ctx context.Context, req *engine.Request) (any, error) {
				var r ListRoutesRequest
				if err := req.Bind(&r); err != nil {
					return nil, err
				}
				rs, err := gw.ListRoutes(ctx)
				if err != nil {
					return nil, err
				}
				return listPage(rs, r, req.Codec, e.Conn().MaxPayload())
			},
		},
	}
	for _, fn := range fns {
		if err := w.Register(fn); err != nil {
			_ = w.Close(context.Background())
			return nil, err
		}
	}
	return w, nil
}
