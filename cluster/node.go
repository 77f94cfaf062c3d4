package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	readyTimeout = 10 * time.Second
	// DefaultJetStreamWait bounds [Node.WaitJetStream] when ctx has no
	// deadline.
	DefaultJetStreamWait = time.Minute
	jsPollInterval       = 50 * time.Millisecond
	jsProbeTimeout       = time.Second
	// jsWaitLogAfter and jsWaitLogEvery pace WaitJetStream's "waiting"
	// log line: quiet through a normal election, then regular.
	jsWaitLogAfter = 2 * time.Second
	jsWaitLogEvery = 10 * time.Second
)

// Node is a running embedded nats-server.
type Node struct {
	srv      *server.Server
	cfg      Config
	leafAddr string
}

// Start validates cfg, starts the server and waits until all its listeners
// (client, route, gateway, leaf node) accept connections, the server gives
// up (a fatal error such as a port in use, reported at once), or ctx ends.
// It does not wait for a JetStream cluster to elect its meta leader: call
// [Node.WaitJetStream] for that.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	o, err := cfg.options()
	if err != nil {
		return nil, err
	}
	if o.JetStream {
		if err := os.MkdirAll(cfg.StoreDir, 0o700); err != nil {
			return nil, fmt.Errorf("%w: store dir: %v", ErrInvalidConfig, err)
		}
		if o.Cluster.Port != 0 {
			if err := checkClusteredStore(cfg.StoreDir); err != nil {
				return nil, err
			}
			if err := checkClusterName(cfg.StoreDir, o.Cluster.Name); err != nil {
				return nil, err
			}
		} else if err := checkStandaloneStore(cfg.StoreDir); err != nil {
			return nil, err
		}
	}
	srv, err := server.NewServer(o)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if len(cfg.Leaf.URLs) > 0 {
		// Before Start, so no request can cross the leaf unmapped.
		acc := srv.GlobalAccount()
		for src, dst := range edgeJSMappings {
			if err := acc.AddMapping(src, dst); err != nil {
				return nil, fmt.Errorf("cluster: leaf JetStream mapping %s: %w", src, err)
			}
		}
	}
	// Always install the adapter, even without a Logger: it is how a fatal
	// start error (port in use, JetStream refusing to cluster) ends the wait
	// below at once instead of after readyTimeout.
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, l := range cfg.openListeners() {
		log.Warn("listener accepts peers without authentication: any host that reaches it joins with full rights (every KV bucket, every subject)",
			"listener", l.key, "address", l.listen, "fix", l.fix)
	}
	fatal := make(chan string, 1)
	srv.SetLoggerV2(slogAdapter{l: log, fatal: fatal}, cfg.Debug, false, false)
	srv.Start()

	deadline := time.Now().Add(readyTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	fail := func(why string) (*Node, error) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("%w on %s:%d: %s", ErrNotReady, o.Host, o.Port, why)
	}
	for !srv.ReadyForConnections(50 * time.Millisecond) {
		select {
		case msg := <-fatal:
			return fail(msg)
		case <-ctx.Done():
			return fail(ctx.Err().Error())
		default:
		}
		if time.Now().After(deadline) {
			return fail("not ready in " + readyTimeout.String())
		}
	}
	n := &Node{srv: srv, cfg: cfg}
	if cfg.LeafNodes.Listen != "" {
		// The server writes the resolved random port back into its options
		// before it publishes the listener; Varz reads it under its lock.
		if v, err := srv.Varz(&server.VarzOptions{}); err == nil && v.LeafNode.Port > 0 {
			n.leafAddr = net.JoinHostPort(v.LeafNode.Host, strconv.Itoa(v.LeafNode.Port))
		}
	}
	return n, nil
}

// openListener is a peer listener that needs no credentials.
type openListener struct{ key, listen, fix string }

// openListeners are the route, gateway and leaf node listeners that bind a
// non-loopback address without authentication. Loopback ones are left out:
// only this machine reaches them (tests, a one-node region's self-route).
func (c Config) openListeners() []openListener {
	var out []openListener
	add := func(key, listen string, authed bool, fix string) {
		if listen == "" || authed {
			return
		}
		if host, _, err := splitListen(listen); err == nil && !isLoopback(host) {
			out = append(out, openListener{key, listen, fix})
		}
	}
	add("cluster.listen", c.Cluster.Listen, !c.Cluster.Authorization.IsZero(), "set cluster.authorization (iii up --cluster-user, III_CLUSTER_PASSWORD), or listen on a private network only")
	add("gateway.listen", c.Gateway.Listen, !c.Gateway.Authorization.IsZero(), "set gateway.authorization (iii up --gateway-user, III_GATEWAY_PASSWORD), or listen on a private network only")
	add("leafnodes.listen", c.LeafNodes.Listen, len(c.LeafNodes.Users) > 0, "set leafnodes.users, or listen on a private network only")
	return out
}

// isLoopback reports whether a listen host is reachable from this machine only.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkClusteredStore refuses to start a clustered server on the store of
// a standalone one: nats-server recovers only the streams its meta group
// assigned, so a standalone node's streams (every bucket and session of
// an `iii up` that ran without --cluster) would be left on disk unseen,
// and iii would create its buckets again, empty.
func checkClusteredStore(storeDir string) error {
	js := filepath.Join(storeDir, "jetstream")
	if _, err := os.Stat(filepath.Join(js, "$SYS", "_js_", "_meta_")); err == nil {
		return nil // a cluster member's store
	}
	streams, _ := filepath.Glob(filepath.Join(js, "*", "streams", "*"))
	if len(streams) == 0 {
		return nil
	}
	names := make([]string, 0, 3)
	for _, p := range streams[:min(3, len(streams))] {
		names = append(names, filepath.Base(p))
	}
	if len(streams) > 3 {
		names = append(names, "…")
	}
	return fmt.Errorf("%w: store_dir %s holds the streams of a standalone node (%s, %d in all): a clustered server would not see them (only the streams its meta group created), so their data would look lost; start this store standalone, or give the cluster member an empty store_dir and copy the streams it needs (nats stream backup, then restore into the cluster)",
		ErrInvalidConfig, storeDir, strings.Join(names, ", "), len(streams))
}

// checkStandaloneStore refuses to start a standalone server on the store
// of a cluster member (one a clustered start recorded its cluster name in,
// or that holds a meta group's state): it would serve that member's copies
// of the cluster's streams alone, stale, and the writes it took would
// diverge from the cluster's (a member restarted without its cluster
// settings by mistake).
func checkStandaloneStore(storeDir string) error {
	name := ""
	if b, err := os.ReadFile(filepath.Join(storeDir, clusterNameFile)); err == nil {
		name = strings.TrimSpace(string(b))
	}
	meta := filepath.Join(storeDir, "jetstream", "$SYS", "_js_")
	if _, err := os.Stat(filepath.Join(meta, "_meta_")); name == "" && err != nil {
		return nil
	}
	was := "a cluster"
	if name != "" {
		was = fmt.Sprintf("cluster %q", name)
	}
	return fmt.Errorf("%w: store_dir %s is a member's store of %s: a standalone server would serve its copies of the cluster's streams alone, and they would diverge; start it with its cluster settings (--cluster, --routes), or give a standalone node another store_dir (to make this store standalone on purpose, delete %s and %s first)",
		ErrInvalidConfig, storeDir, was, filepath.Join(storeDir, clusterNameFile), meta)
}

// clusterNameFile records, in a clustered store, the cluster it belongs to.
const clusterNameFile = "iii-cluster-name"

// checkClusterName refuses to start a store written by a member of another
// cluster (or region) under a new name, and records the name of a store
// that has none yet. nats-server keeps the meta group's peers and the
// streams' Raft groups in the store: under another cluster name the
// members elected a meta leader and then hung on their buckets' reads.
func checkClusterName(storeDir, name string) error {
	p := filepath.Join(storeDir, clusterNameFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		if was := strings.TrimSpace(string(b)); was != name {
			return fmt.Errorf("%w: store_dir %s belongs to cluster %q, not %q: start it with --cluster %s (or --region %s), or give this member an empty store_dir (its data comes from the other members)",
				ErrInvalidConfig, storeDir, was, name, was, was)
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: store dir: %v", ErrInvalidConfig, err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(name+"\n"), 0o600); err != nil {
		return fmt.Errorf("%w: store dir: %v", ErrInvalidConfig, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%w: store dir: %v", ErrInvalidConfig, err)
	}
	return nil
}

// Server is the embedded server.
func (n *Node) Server() *server.Server { return n.srv }

// Config is the configuration the node was started with.
func (n *Node) Config() Config { return n.cfg }

// ClientURL is the URL other processes connect to.
func (n *Node) ClientURL() string { return clientURL(n.srv.ClientURL()) }

// clientURL is the server's client URL with a wildcard listen host
// (0.0.0.0, ::) replaced by the loopback address: a client dials an
// address, and the URL iii up prints and hands its worker processes should
// be one a user can paste.
func clientURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	ip := net.ParseIP(u.Hostname())
	if ip == nil || !ip.IsUnspecified() {
		return s
	}
	lo := "127.0.0.1"
	if ip.To4() == nil {
		lo = "::1"
	}
	u.Host = net.JoinHostPort(lo, u.Port())
	return u.String()
}

// ClusterAddr is the route listen address "host:port" with the real port,
// or "" when clustering is off. A one-node region with JetStream has a
// loopback-only route listener (see [GatewayConfig]); it is reported too.
func (n *Node) ClusterAddr() string { return tcpAddr(n.srv.ClusterAddr()) }

// GatewayAddr is the gateway listen address "host:port" with the real port,
// or "" when gateways are off.
func (n *Node) GatewayAddr() string { return tcpAddr(n.srv.GatewayAddr()) }

// LeafAddr is the leaf node listen address "host:port" with the real port,
// or "" when this node accepts no leaf nodes.
func (n *Node) LeafAddr() string { return n.leafAddr }

func tcpAddr(a *net.TCPAddr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// Connect opens an in-process connection (no TCP) to the node.
func (n *Node) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(n.srv), nats.Name("iii-node"), nats.MaxReconnects(-1)}, opts...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect in-process: %w", err)
	}
	return nc, nil
}

// WaitJetStream waits until JetStream is usable from this node:
//   - standalone JetStream: returns at once;
//   - clustered JetStream (routes or gateways): until the meta group has a
//     leader and the account answers a JetStream account info request;
//   - no JetStream here (a leaf, or NoJetStream): until some JetStream
//     reachable through the leaf connection, routes or gateways answers.
//
// Without a ctx deadline it waits at most [DefaultJetStreamWait]. Past 2 s
// it logs a "waiting for JetStream" warning every 10 s to [Config.Logger],
// saying what is missing (for a cluster: the servers the meta group
// expects, the other servers routed to, the routes not reached). The
// error wraps [ErrNotReady] and says what was last missing.
func (n *Node) WaitJetStream(ctx context.Context) error {
	clustered := n.cfg.jetStream() && n.cfg.clustered()
	if n.cfg.jetStream() && !clustered {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultJetStreamWait)
		defer cancel()
	}
	nc, err := n.Connect(nats.Name("iii-wait-jetstream"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("cluster: jetstream: %w", err)
	}
	tick := time.NewTicker(jsPollInterval)
	defer tick.Stop()
	log := n.cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	nextLog := start.Add(jsWaitLogAfter)
	for {
		last := n.probeJetStream(ctx, js, clustered)
		if last == nil {
			return nil
		}
		if now := time.Now(); now.After(nextLog) {
			// A first node of a cluster waits for its peers: say for what.
			log.Warn("waiting for JetStream", "node", n.srv.Name(), "waited", now.Sub(start).Round(time.Second), "missing", last.Error())
			nextLog = now.Add(jsWaitLogEvery)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: JetStream on %s: %v (%w)", ErrNotReady, n.srv.Name(), last, ctx.Err())
		case <-tick.C:
		}
	}
}

// probeJetStream is one readiness check of WaitJetStream.
func (n *Node) probeJetStream(ctx context.Context, js jetstream.JetStream, clustered bool) error {
	if clustered {
		jsz, err := n.srv.Jsz(&server.JSzOptions{})
		if err != nil {
			return fmt.Errorf("jsz: %w", err)
		}
		if jsz.Meta == nil || jsz.Meta.Leader == "" {
			return n.noMetaLeader(jsz.Meta)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, jsProbeTimeout)
	defer cancel()
	if _, err := js.AccountInfo(pctx); err != nil {
		return fmt.Errorf("account info: %w", err)
	}
	return nil
}

// noMetaLeader says why a clustered node has no meta leader yet: how many
// servers the meta group expects and needs, and which of them this node
// reaches.
func (n *Node) noMetaLeader(meta *server.MetaClusterInfo) error {
	var b strings.Builder
	b.WriteString("no JetStream meta leader yet")
	if meta != nil && meta.Size > 0 {
		// nats-server 2.15: a brand-new meta group did not elect with 2
		// of its 3 members in 20 s (TestFirstMemberWaitsAndSaysWhy).
		fmt.Fprintf(&b, ": the meta group expects %d servers (all of them at a cluster's first start, a majority once it has had a leader)", meta.Size)
	}
	fmt.Fprintf(&b, "; this node routes to %d other servers of cluster %q", n.srv.NumRemotes(), n.srv.ClusterName())
	if n.cfg.Gateway.Listen != "" {
		fmt.Fprintf(&b, " and has %d gateways to other regions", n.srv.NumOutboundGateways())
	}
	if others := n.cfg.otherRoutes(); len(others) > 0 && n.srv.NumRemotes() < len(others) {
		fmt.Fprintf(&b, " (routes: %s): start the other members, and check that they reach this node's route port and use the same cluster name", strings.Join(others, ", "))
	}
	return errors.New(b.String())
}

// Close shuts the server down (lame-duck free: clients see a disconnect) and
// waits for it to stop or ctx to end.
func (n *Node) Close(ctx context.Context) error {
	n.srv.Shutdown()
	done := make(chan struct{})
	go func() { n.srv.WaitForShutdown(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cluster: shutdown: %w", ctx.Err())
	}
}

// slogAdapter routes nats-server logging into slog: notices at debug level
// (the server is chatty at start), warnings and errors as such. Fatalf is
// logged as an error instead of exiting the process — the embedding program
// decides — and is handed to Start through fatal (never blocking).
type slogAdapter struct {
	l     *slog.Logger
	fatal chan<- string
}

func (a slogAdapter) log(level slog.Level, msg, f string, v []any) {
	if a.l.Enabled(context.Background(), level) {
		a.l.Log(context.Background(), level, msg, "text", fmt.Sprintf(f, v...))
	}
}

func (a slogAdapter) Noticef(f string, v ...any) { a.log(slog.LevelDebug, "nats-server", f, v) }
func (a slogAdapter) Warnf(f string, v ...any)   { a.log(slog.LevelWarn, "nats-server", f, v) }
func (a slogAdapter) Errorf(f string, v ...any)  { a.log(slog.LevelError, "nats-server", f, v) }
func (a slogAdapter) Debugf(f string, v ...any)  { a.log(slog.LevelDebug, "nats-server", f, v) }
func (a slogAdapter) Tracef(f string, v ...any)  { a.log(slog.LevelDebug, "nats-server trace", f, v) }
func (a slogAdapter) Fatalf(f string, v ...any) {
	text := fmt.Sprintf(f, v...)
	a.l.Error("nats-server fatal", "text", text)
	if a.fatal != nil {
		select {
		case a.fatal <- text:
		default:
		}
	}
}
