package httpgw

import (
	"context"
	"fmt"

	"github.com/iii-on-nats/iii/engine"
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

// ListRoutesResponse is the reply of http::list_routes.
type ListRoutesResponse struct {
	Routes []Route `json:"routes"`
}

// Serve starts the "http" worker with http::add_route {method, path,
// function_id} (→ the route in normal form), http::remove_route {method,
// path} (→ {removed}) and http::list_routes {} (→ {routes}). They act on
// the routes bucket through gw, so every gateway follows. ctx bounds the
// setup only.
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
			ID:             FnListRoutes,
			Description:    "List the stored HTTP routes, sorted by path and method.",
			RequestSchema:  `{"type":"object"}`,
			ResponseSchema: `{"type":"object","required":["routes"],"properties":{"routes":{"type":"array"}}}`,
			Idempotent:     true,
			Handler: engine.Typed(func(ctx context.Context, _ engine.Empty) (ListRoutesResponse, error) {
				rs, err := gw.ListRoutes(ctx)
				return ListRoutesResponse{Routes: rs}, err
			}),
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
