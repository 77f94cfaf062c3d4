package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Defaults of a single laptop node.
const (
	DefaultHost      = "127.0.0.1"
	DefaultPort      = 4222
	DefaultMaxMemory = 256 << 20
	DefaultMaxStore  = 10 << 30
	readyTimeout     = 10 * time.Second
)

// Config describes one embedded nats-server.
type Config struct {
	// Name is the server name (unique within a cluster); default "iii".
	Name string
	// Host and Port are the client listen address; Port -1 picks a random
	// free port, 0 means DefaultPort.
	Host string
	Port int
	// StoreDir is where JetStream keeps streams and KV (required).
	StoreDir string
	// MaxMemory and MaxStore bound JetStream memory and file storage; zero
	// means the defaults (never the server's own 75%-of-RAM default).
	MaxMemory, MaxStore int64
	// MaxPayload is the largest message in bytes; zero means 1 MiB.
	MaxPayload int32
	// MonitorPort serves the nats-server HTTP monitoring endpoints (/varz,
	// /jsz, …) on Host when > 0.
	MonitorPort int
	// Logger receives the server's log lines; nil silences them.
	Logger *slog.Logger
	// Debug enables the server's debug logging (to Logger).
	Debug bool
}

func (c Config) options() (*server.Options, error) {
	if c.StoreDir == "" {
		return nil, fmt.Errorf("%w: StoreDir is required", ErrInvalidConfig)
	}
	if c.Port < -1 || c.Port > 65535 {
		return nil, fmt.Errorf("%w: port %d", ErrInvalidConfig, c.Port)
	}
	o := &server.Options{
		ServerName:         c.Name,
		Host:               c.Host,
		Port:               c.Port,
		JetStream:          true,
		StoreDir:           c.StoreDir,
		JetStreamMaxMemory: c.MaxMemory,
		JetStreamMaxStore:  c.MaxStore,
		MaxPayload:         c.MaxPayload,
		NoSigs:             true,
		NoLog:              c.Logger == nil,
		Debug:              c.Debug,
	}
	if o.ServerName == "" {
		o.ServerName = "iii"
	}
	if o.Host == "" {
		o.Host = DefaultHost
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.JetStreamMaxMemory == 0 {
		o.JetStreamMaxMemory = DefaultMaxMemory
	}
	if o.JetStreamMaxStore == 0 {
		o.JetStreamMaxStore = DefaultMaxStore
	}
	if c.MonitorPort > 0 {
		o.HTTPHost = o.Host
		o.HTTPPort = c.MonitorPort
	}
	return o, nil
}

// Node is a running embedded nats-server.
type Node struct {
	srv *server.Server
}

// Start starts the server and waits until it accepts connections or ctx
// ends.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	o, err := cfg.options()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StoreDir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: store dir: %v", ErrInvalidConfig, err)
	}
	srv, err := server.NewServer(o)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if cfg.Logger != nil {
		srv.SetLoggerV2(slogAdapter{cfg.Logger}, cfg.Debug, false, false)
	}
	srv.Start()
	wait := readyTimeout
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	if !srv.ReadyForConnections(wait) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("%w on %s:%d within %v", ErrNotReady, o.Host, o.Port, wait)
	}
	return &Node{srv: srv}, nil
}

// Server is the embedded server.
func (n *Node) Server() *server.Server { return n.srv }

// ClientURL is the URL other processes connect to.
func (n *Node) ClientURL() string { return n.srv.ClientURL() }

// Connect opens an in-process connection (no TCP) to the node.
func (n *Node) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(n.srv), nats.Name("iii-node"), nats.MaxReconnects(-1)}, opts...)
	nc, err := nats.Connect("", opts...)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect in-process: %w", err)
	}
	return nc, nil
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
// logged as an error instead of exiting the process: the embedding program
// decides.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(f string, v ...any) {
	a.l.Debug("nats-server", "text", fmt.Sprintf(f, v...))
}
func (a slogAdapter) Warnf(f string, v ...any) {
	a.l.Warn("nats-server", "text", fmt.Sprintf(f, v...))
}
func (a slogAdapter) Fatalf(f string, v ...any) {
	a.l.Error("nats-server fatal", "text", fmt.Sprintf(f, v...))
}
func (a slogAdapter) Errorf(f string, v ...any) {
	a.l.Error("nats-server", "text", fmt.Sprintf(f, v...))
}
func (a slogAdapter) Debugf(f string, v ...any) {
	a.l.Debug("nats-server", "text", fmt.Sprintf(f, v...))
}
func (a slogAdapter) Tracef(f string, v ...any) {
	a.l.Debug("nats-server trace", "text", fmt.Sprintf(f, v...))
}
