package httpgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/subjects"
)

// RoutesBucketConfig is the KV bucket of routes: one key per route shape,
// "<METHOD>.<escaped path segments>" (":" and "*" segments become "=3A" and
// "=2A"; any method is "_any"), the value the [Route] as JSON.
func RoutesBucketConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      subjects.HTTPRoutesBucket,
		Description: "iii HTTP gateway routes: <METHOD>.<path shape> → {method, path, function_id}",
		History:     1,
		Storage:     jetstream.FileStorage,
	}
}

// Gateway is the HTTP trigger gateway: an http.Handler that maps requests
// onto function calls by the routes in [subjects.HTTPRoutesBucket]. Every
// replica watches the bucket, so all serve the same routes and pick up
// changes live. Mount it on any http.Server.
type Gateway struct {
	e    *engine.Engine
	opts options
	kv   jetstream.KeyValue

	stop      context.CancelFunc
	watchDone chan struct{}
	closed    atomic.Bool

	table atomic.Pointer[table]

	mu      sync.Mutex
	entries map[string]entry // by KV key; deleted keys stay as tombstones
}

// entry is one key's latest known state: route nil means deleted.
type entry struct {
	route *compiled
	rev   uint64
}

var _ http.Handler = (*Gateway)(nil)

// New opens the routes bucket (creating it when missing), loads every
// route and starts following the bucket; it returns once the stored routes
// are loaded. Stop it with [Gateway.Close].
func New(ctx context.Context, e *engine.Engine, opts ...Option) (*Gateway, error) {
	if e == nil {
		return nil, fmt.Errorf("%w: nil engine", engine.ErrInvalidOption)
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	kv, err := e.EnsureKV(ctx, RoutesBucketConfig())
	if err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(context.Background())
	w, err := engine.WatchKV(wctx, e.Conn(), kv, engine.KVWatchConfig{})
	if err != nil {
		stop()
		return nil, wire.Wrap(wire.CodeUnavailable, err, "watch %s", subjects.HTTPRoutesBucket)
	}
	g := &Gateway{e: e, opts: o, kv: kv, stop: stop, watchDone: make(chan struct{}), entries: map[string]entry{}}
	g.table.Store(buildTable(nil))
	ready := make(chan struct{})
	go g.watch(wctx, w, ready)
	select {
	case <-ready:
		return g, nil
	case <-g.watchDone:
		_ = g.Close(ctx)
		return nil, wire.Errorf(wire.CodeUnavailable, "watch of %s ended before the routes loaded", subjects.HTTPRoutesBucket)
	case <-ctx.Done():
		_ = g.Close(context.Background())
		return nil, wire.FromNATS(ctx.Err())
	}
}

// decodeRoute reads a stored route and checks it sits under its own key.
func decodeRoute(key string, value []byte) (*compiled, error) {
	var r Route
	if err := json.Unmarshal(value, &r); err != nil {
		return nil, err
	}
	c, err := compileRoute(r)
	if err != nil {
		return nil, err
	}
	if c.key != key {
		return nil, fmt.Errorf("route %s %s belongs under key %q", c.Method, c.Path, c.key)
	}
	return c, nil
}

// apply records key's state at rev (route nil: deleted) unless a newer
// revision is already known, and (when rebuild is set; not while the
// initial snapshot loads) swaps in a new table.
func (g *Gateway) apply(key string, c *compiled, rev uint64, rebuild bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur, ok := g.entries[key]; ok && cur.rev >= rev {
		return
	}
	g.entries[key] = entry{route: c, rev: rev}
	if rebuild {
		g.rebuildLocked()
	}
}

// replace makes entries (a watch's snapshot of the bucket) the routes
// served: revisions of a bucket created again start over, so they are
// not compared with the old ones.
func (g *Gateway) replace(entries map[string]entry) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.entries = entries
	g.rebuildLocked()
}

func (g *Gateway) rebuildLocked() {
	routes := make([]*compiled, 0, len(g.entries))
	for _, en := range g.entries {
		if en.route != nil {
			routes = append(routes, en.route)
		}
	}
	g.table.Store(buildTable(routes))
}

// Routes is the set of routes this gateway serves right now, sorted by
// path and method. It follows the bucket with the latency of a KV watch.
func (g *Gateway) Routes() []Route {
	g.mu.Lock()
	out := make([]Route, 0, len(g.entries))
	for _, en := range g.entries {
		if en.route != nil {
			out = append(out, en.route.Route)
		}
	}
	g.mu.Unlock()
	sortRoutes(out)
	return out
}

func sortRoutes(rs []Route) {
	sort.Slice(rs, func(a, b int) bool {
		if rs[a].Path != rs[b].Path {
			return rs[a].Path < rs[b].Path
		}
		return rs[a].Method < rs[b].Method
	})
}

// AddRoute stores r for every gateway; this one serves it when AddRoute
// returns, the others within a KV watch's latency. Adding a route that is
// already there is a no-op. Errors are *wire.Error: invalid_payload
// ([ErrInvalidRoute]), conflict ([ErrRouteConflict]) when a route that
// matches the same requests exists with another function or parameter
// names, unavailable when JetStream does not answer or the gateway is closed.
func (g *Gateway) AddRoute(ctx context.Context, r Route) error {
	if g.closed.Load() {
		return closedErr()
	}
	c, err := compileRoute(r)
	if err != nil {
		return err
	}
	val, err := json.Marshal(c.Route)
	if err != nil {
		return wire.Wrap(wire.CodeInternal, err, "route does not encode")
	}
	// Create, or find the route already there; a key deleted between the
	// two is retried.
	for range 3 {
		rev, err := g.kv.Create(ctx, c.key, val)
		if err == nil {
			g.apply(c.key, c, rev, true)
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return wire.Wrap(wire.CodeUnavailable, err, "store route %s %s", c.Method, c.Path)
		}
		ent, err := g.kv.Get(ctx, c.key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return wire.Wrap(wire.CodeUnavailable, err, "read route %s %s", c.Method, c.Path)
		}
		var old Route
		if json.Unmarshal(ent.Value(), &old) == nil && old == c.Route {
			g.apply(c.key, c, ent.Revision(), true)
			return nil
		}
		// Taken stays taken until someone removes the route: a retry
		// cannot succeed, unlike a lost compare-and-set below.
		return wire.Wrap(wire.CodeConflict, fmt.Errorf("%w: %s %s → %s is taken by %s %s → %s",
			ErrRouteConflict, c.Method, c.Path, c.FunctionID, old.Method, old.Path, old.FunctionID), "").
			WithDetails(map[string]any{"existing": map[string]any{"method": old.Method, "path": old.Path, "function_id": old.FunctionID}}).
			Permanent()
	}
	return wire.Errorf(wire.CodeConflict, "route %s %s changed concurrently; retry", c.Method, c.Path)
}

// RemoveRoute deletes the route with exactly this method and path pattern
// (after normalization); removed is false when there was none.
func (g *Gateway) RemoveRoute(ctx context.Context, method, path string) (removed bool, err error) {
	if g.closed.Load() {
		return false, closedErr()
	}
	c, err := compilePattern(method, path, "")
	if err != nil {
		return false, err
	}
	ent, err := g.kv.Get(ctx, c.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, wire.Wrap(wire.CodeUnavailable, err, "read route %s %s", c.Method, c.Path)
	}
	var old Route
	if json.Unmarshal(ent.Value(), &old) == nil && (old.Method != c.Method || old.Path != c.Path) {
		return false, nil // same shape, other parameter names: not this route
	}
	if err := g.kv.Delete(ctx, c.key, jetstream.LastRevision(ent.Revision())); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, wire.Wrap(wire.CodeConflict, err, "route %s %s changed while being removed", c.Method, c.Path)
		}
		return false, wire.Wrap(wire.CodeUnavailable, err, "delete route %s %s", c.Method, c.Path)
	}
	// The delete's own revision is unknown but above ent's, and the CAS
	// guarantees no write to this key in between.
	g.apply(c.key, nil, ent.Revision()+1, true)
	return true, nil
}

// ListRoutes reads every stored route from the bucket (the set all
// gateways converge on), sorted by path and method.
func (g *Gateway) ListRoutes(ctx context.Context) ([]Route, error) {
	lister, err := g.kv.ListKeys(ctx)
	if err != nil {
		return nil, wire.Wrap(wire.CodeUnavailable, err, "list routes")
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	if err := ctx.Err(); err != nil {
		return nil, wire.FromNATS(err)
	}
	out := []Route{}
	for _, k := range keys {
		ent, err := g.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, wire.Wrap(wire.CodeUnavailable, err, "read route %s", k)
		}
		c, err := decodeRoute(k, ent.Value())
		if err != nil {
			continue
		}
		out = append(out, c.Route)
	}
	sortRoutes(out)
	return out, nil
}

// Close stops following the bucket. Requests in flight finish; new ones
// are answered 503.
func (g *Gateway) Close(ctx context.Context) error {
	g.closed.Store(true)
	g.stop()
	select {
	case <-g.watchDone:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("httpgw: close: %w", ctx.Err())
	}
}

// ServeHTTP routes one request to its function; see the package doc for
// the status codes.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := g.e
	ctx := untrustedBaggage(e.Extract(r.Context(), nats.Header(r.Header)))
	ctx, span := e.Tracer().Start(ctx, r.Method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path)))
	defer span.End()
	status := g.serve(ctx, span, w, r)
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
}

// reservedBaggage prefixes the baggage members the engine sets itself
// (engine.AttrSessionID, engine.AttrMessageID).
const reservedBaggage = "iii."

// untrustedBaggage drops the engine's own members from the baggage an
// HTTP client sent: they name the session whose resources a tool works on
// (engine.SessionFromContext), which a client must not choose for the
// function and the calls it makes. Other members pass.
func untrustedBaggage(ctx context.Context) context.Context {
	b := baggage.FromContext(ctx)
	out := b
	for _, m := range b.Members() {
		if strings.HasPrefix(m.Key(), reservedBaggage) {
			out = out.DeleteMember(m.Key())
		}
	}
	if out.Len() == b.Len() {
		return ctx
	}
	return baggage.ContextWithBaggage(ctx, out)
}

// serve handles the request and returns the status it wrote.
func (g *Gateway) serve(ctx context.Context, span trace.Span, w http.ResponseWriter, r *http.Request) int {
	// The write deadline is per response (WithWriteTimeout). Before the
	// response, the only write is a 100 Continue when the body is read,
	// which a client that does not read could block too: it gets a
	// deadline past the body and the function call, so that the function's
	// time never cuts the request (HTTP/2 resets a stream when its deadline
	// passes). ErrNotSupported (a ResponseWriter that is no connection):
	// no deadline.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(sumDurations(g.opts.bodyTimeout, g.opts.timeout, g.opts.writeTimeout)))
	// The body timeout runs from now, also for a request answered before
	// its body is read (404, 405, 413, ...): net/http then drains the
	// unread body (up to 256 KiB) before it writes the answer, and after
	// it, with no deadline of its own on a server without ReadTimeout, so
	// a client that never sends the body it announced would hold the
	// connection for ever without an answer. A request without a body
	// sets no deadline (see readBody).
	hasBody := r.Body != nil && r.Body != http.NoBody
	if hasBody {
		_ = rc.SetReadDeadline(time.Now().Add(g.opts.bodyTimeout))
	}
	startResponse := func() { _ = rc.SetWriteDeadline(time.Now().Add(g.opts.writeTimeout)) }
	fail := func(status int, e *wire.Error) int {
		startResponse()
		writeError(w, status, e)
		return status
	}
	if g.closed.Load() {
		return fail(http.StatusServiceUnavailable, wire.Errorf(wire.CodeUnavailable, "gateway is shutting down"))
	}
	segs, err := requestSegments(r.URL)
	if err != nil {
		return fail(http.StatusBadRequest, wire.Errorf(wire.CodeInvalidPayload, "malformed path: %v", err))
	}
	m := g.table.Load().lookup(r.Method, segs)
	if m.route == nil {
		if len(m.allow) > 0 {
			w.Header().Set("Allow", strings.Join(m.allow, ", "))
			return fail(http.StatusMethodNotAllowed, wire.Errorf(wire.CodeNotFound, "method %s is not routed for %s", r.Method, r.URL.Path).
				WithDetails(map[string]any{"allow": m.allow}))
		}
		return fail(http.StatusNotFound, wire.Errorf(wire.CodeNotFound, "no route for %s %s", r.Method, r.URL.Path))
	}
	rt := m.route
	span.SetName(r.Method + " " + rt.Path)
	span.SetAttributes(attribute.String("http.route", rt.Path), attribute.String(engine.AttrFunctionID, rt.FunctionID))

	tooLarge := func(size int64, limit int64, what string) int {
		details := map[string]any{"limit": limit}
		if size >= 0 {
			details["size"] = size
		}
		return fail(http.StatusRequestEntityTooLarge, wire.Errorf(wire.CodeInvalidPayload, "%s exceeds %d bytes", what, limit).
			WithDetails(details))
	}
	if r.ContentLength > g.opts.maxBody {
		return tooLarge(r.ContentLength, g.opts.maxBody, "request body")
	}
	body, err := g.readBody(w, rc, r, hasBody)
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return tooLarge(-1, g.opts.maxBody, "request body")
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fail(http.StatusRequestTimeout, wire.Errorf(wire.CodeTimeout, "request body not received within %v", g.opts.bodyTimeout))
		}
		return fail(http.StatusBadRequest, wire.Errorf(wire.CodeInvalidPayload, "reading the request body: %v", err))
	}
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return fail(http.StatusBadRequest, wire.Errorf(wire.CodeInvalidPayload, "malformed query: %v", err))
	}
	headers := requestHeaders(r)
	if err := checkUTF8(query, headers); err != nil {
		return fail(http.StatusBadRequest, wire.Errorf(wire.CodeInvalidPayload, "%v", err))
	}
	req := Request{
		Method:     r.Method,
		Path:       r.URL.Path,
		Route:      rt.Path,
		PathParams: m.params,
		Query:      query,
		Headers:    headers,
		RemoteAddr: r.RemoteAddr,
	}
	req.Body, req.BodyBase64 = encodeBody(r.Header.Get("Content-Type"), body)
	codec := g.e.Codec()
	payload, err := codec.Marshal(req)
	if err != nil {
		return fail(http.StatusInternalServerError, wire.Wrap(wire.CodeInternal, err, "request does not encode"))
	}
	// The NATS headers count against the max payload too: leave room for
	// them, trace context and baggage included (the client picks their
	// size).
	if limit := g.e.Conn().MaxPayload() - g.callHeaderBytes(ctx); int64(len(payload)) > limit {
		return tooLarge(int64(len(payload)), limit, "encoded request")
	}

	cctx, cancel := context.WithTimeout(ctx, g.opts.timeout)
	defer cancel()
	var reply engine.Raw
	if err := g.e.Trigger(cctx, rt.FunctionID, engine.Raw(payload), &reply); err != nil {
		we := wire.From(err)
		if errors.Is(cctx.Err(), context.DeadlineExceeded) && r.Context().Err() == nil {
			we = wire.Errorf(wire.CodeTimeout, "function %s did not answer within %v", rt.FunctionID, g.opts.timeout)
		}
		if r.Context().Err() != nil {
			// The client went away (or half-closed): no server error. The
			// answer is still written, or net/http would send an empty 200.
			return fail(statusClientClosed, we)
		}
		if we.Code == wire.CodeInternal || we.Code == wire.CodeFunctionNotFound {
			g.e.Logger().Warn("http function failed", "function_id", rt.FunctionID, "route", rt.Path, "error", err)
		}
		return fail(StatusFor(we.Code), we)
	}
	var rr replyResponse
	if err := codec.Unmarshal(reply, &rr); err != nil {
		// A foreign worker may answer JSON whatever it was sent.
		if jerr := wire.JSON.Unmarshal(reply, &rr); jerr != nil {
			return fail(http.StatusBadGateway, wire.Errorf(wire.CodeInternal, "%v: %v", errBadResponse, err))
		}
	}
	status, hdr, out, err := render(&rr)
	if err != nil {
		g.e.Logger().Warn("http function returned a bad response", "function_id", rt.FunctionID, "error", err)
		return fail(http.StatusBadGateway, wire.Errorf(wire.CodeInternal, "%v", err))
	}
	for k, v := range hdr {
		w.Header()[k] = v
	}
	startResponse()
	w.WriteHeader(status)
	if _, err := w.Write(out); err != nil {
		// The client went away or did not read within the write timeout;
		// net/http closes the connection.
		span.RecordError(err)
		g.e.Logger().Debug("http response not delivered", "route", rt.Path, "error", err)
	}
	return status
}

// sumDurations adds positive durations, saturating: timeouts as long as a
// Duration holds (no limit, in effect) would wrap to a negative sum, a
// deadline in the past.
func sumDurations(ds ...time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range ds {
		if d > math.MaxInt64-sum {
			return math.MaxInt64
		}
		sum += d
	}
	return sum
}

// callHeaderBytes bounds the size of the NATS headers of the function call
// made under ctx: the trace context and baggage the engine injects, plus a
// fixed allowance for the status line, Content-Type and timeout headers.
func (g *Gateway) callHeaderBytes(ctx context.Context) int64 {
	h := nats.Header{}
	g.e.Inject(ctx, h)
	return 1024 + int64(wire.HeaderSize(h))
}

// readBody reads the request body up to the size limit, within the body
// timeout serve set as the read deadline. A request without a body has no
// deadline: the server's background read that notices a client going away
// is already waiting, and a deadline would cancel the request when it
// passes.
func (g *Gateway) readBody(w http.ResponseWriter, rc *http.ResponseController, r *http.Request, hasBody bool) ([]byte, error) {
	if !hasBody {
		return nil, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.opts.maxBody))
	if err == nil {
		// Read to the end; the function's time is bounded by WithTimeout.
		// ErrNotSupported (a ResponseWriter that is no connection): no
		// deadline was set.
		_ = rc.SetReadDeadline(time.Time{})
	}
	return body, err
}

// errNotUTF8 refuses a path whose decoded bytes are not UTF-8: the JSON
// codec would turn them into U+FFFD, so distinct paths would reach the
// function as the same one.
var errNotUTF8 = errors.New("decoded path is not valid UTF-8")

// requestSegments splits the request path into percent-decoded segments,
// ignoring the leading and one trailing slash.
func requestSegments(u *url.URL) ([]string, error) {
	p := u.EscapedPath()
	p = strings.TrimPrefix(p, "/")
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return nil, nil
	}
	parts := strings.Split(p, "/")
	for i, s := range parts {
		d, err := url.PathUnescape(s)
		if err != nil {
			return nil, err
		}
		if !utf8.ValidString(d) {
			return nil, errNotUTF8
		}
		parts[i] = d
	}
	return parts, nil
}
