package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Defaults of a single laptop node.
const (
	DefaultHost      = "127.0.0.1"
	DefaultPort      = 4222
	DefaultMaxMemory = 256 << 20
	DefaultMaxStore  = 10 << 30
	// DefaultName is the server name of a standalone node. Clustered nodes
	// and leaf nodes must set their own unique [Config.Name].
	DefaultName = "iii"
	// DefaultClusterName names a cluster that has neither [ClusterConfig.Name]
	// nor [Config.Region]. Every node of one cluster must use the same name:
	// nats-server silently refuses routes between different names.
	DefaultClusterName = "iii"
	// JetStreamDomain is the JetStream domain of every node that runs
	// JetStream. Leaf nodes (which run none) map their clients' $JS.API,
	// $KV and $OBJ subjects into it, so edge clients use the hub's
	// JetStream with the default API prefix. Tools that talk to a hub
	// through a plain nats-server leaf use `--domain iii`
	// (jetstream.WithDomain).
	JetStreamDomain = "iii"
	// maxPayloadLimit is the server's default max_pending: a larger
	// max_payload is refused at start.
	maxPayloadLimit = 64 << 20
)

// Config describes one embedded nats-server and its place in the topology.
//
// The zero value of every topology section means "off": a Config with only
// StoreDir set is a standalone node with JetStream. Every field has a yaml
// tag so a node can be described by a config file; see [Config.Validate] for
// the rules.
type Config struct {
	// Name is the server name; default [DefaultName]. It must be unique
	// among all servers that meet: clustered nodes, gateways and leaf nodes
	// must set it ([Config.Validate] refuses an empty Name for them).
	Name string `yaml:"name"`
	// Host and Port are the client listen address; Port -1 picks a random
	// free port, 0 means DefaultPort.
	Host string `yaml:"host"`
	Port int    `yaml:"port"`
	// StoreDir is where JetStream keeps streams and KV (required unless
	// JetStream is off).
	StoreDir string `yaml:"store_dir"`
	// MaxMemory and MaxStore bound JetStream memory and file storage; zero
	// means the defaults (never the server's own 75%-of-RAM default).
	MaxMemory int64 `yaml:"max_memory"`
	MaxStore  int64 `yaml:"max_store"`
	// MaxPayload is the largest message in bytes; zero means 1 MiB.
	MaxPayload int32 `yaml:"max_payload"`
	// MonitorPort serves the nats-server HTTP monitoring endpoints (/varz,
	// /jsz, …) on Host when > 0.
	MonitorPort int `yaml:"monitor_port"`
	// Logger receives the server's log lines; nil silences them.
	Logger *slog.Logger `yaml:"-"`
	// Debug enables the server's debug logging (to Logger).
	Debug bool `yaml:"debug"`

	// Cluster joins this node to the other servers of its region (routes).
	Cluster ClusterConfig `yaml:"cluster"`
	// Region names this node's cluster in a supercluster: it is the gateway
	// name and, when Cluster.Name is empty, the cluster name (both set and
	// different is an error).
	Region string `yaml:"region"`
	// Gateway joins this region to other regions.
	Gateway GatewayConfig `yaml:"gateway"`
	// LeafNodes accepts leaf node connections from edge servers (hub side).
	LeafNodes LeafNodeConfig `yaml:"leafnodes"`
	// Leaf makes this node a leaf of a hub (edge side). A leaf runs without
	// JetStream: its clients' $JS.API requests flow to the hub.
	Leaf LeafConfig `yaml:"leaf"`
	// NoJetStream runs the server without JetStream; implied by Leaf.URLs.
	NoJetStream bool `yaml:"no_jetstream"`
}

// ClusterConfig is the route (intra-region) part of a [Config].
type ClusterConfig struct {
	// Name is the cluster name; default Region, else [DefaultClusterName].
	Name string `yaml:"name"`
	// Listen is the route listen address "host:port"; empty turns
	// clustering off, port 0 picks a random port, an empty host listens on
	// all interfaces.
	Listen string `yaml:"listen"`
	// Advertise is the "host:port" other members should dial when Listen is
	// not reachable as is (NAT, containers).
	Advertise string `yaml:"advertise"`
	// Routes are the seed members, "nats-route://host:port". The same list
	// may be given to every member: a route to this node itself is ignored
	// by the server and not counted by [Config.Peers].
	Routes []string `yaml:"routes"`
	// PoolSize is the number of route connections per peer: 0 is the
	// server default (3), -1 disables pooling.
	PoolSize int `yaml:"pool_size"`
	// Authorization is the credential every member accepts on Listen and
	// presents on its routes. Empty means NO authentication: any host
	// that reaches Listen joins the cluster with full rights (every KV
	// bucket, every subject). Give every member the same one.
	Authorization Auth `yaml:"authorization"`
}

// GatewayConfig is the inter-region part of a [Config]. The gateway name is
// [Config.Region].
type GatewayConfig struct {
	// Listen is the gateway listen address "host:port"; empty turns gateways
	// off, port 0 picks a random port.
	Listen string `yaml:"listen"`
	// Advertise is the "host:port" other regions should dial.
	Advertise string `yaml:"advertise"`
	// Gateways are the other regions to dial. A region learns of the regions
	// that dial it, so one side of each pair is enough; an entry for this
	// node's own region is ignored.
	Gateways []RemoteGateway `yaml:"gateways"`
	// Authorization is the credential every region accepts on Listen and
	// presents when it dials another region. Empty means NO
	// authentication: any host that reaches Listen joins the supercluster
	// with full rights. Give every node of every region the same one.
	Authorization Auth `yaml:"authorization"`
}

// Auth is the one user and password of the routes (or the gateways) of a
// cluster: nats-server accepts a single credential there and presents the
// same one when it dials, so every member shares it. The password is
// given inline or, better, in a file (Kubernetes secrets, systemd
// credentials), never in a URL.
type Auth struct {
	// User turns authentication on.
	User string `yaml:"user"`
	// Password is plain text (this node dials with it too, so a bcrypt
	// hash is refused); exclusive with PasswordFile.
	Password string `yaml:"password"`
	// PasswordFile holds the password; a trailing newline is dropped. It
	// is read by [Start] ([Config.Validate] does not touch it).
	PasswordFile string `yaml:"password_file"`
}

// IsZero reports whether no field is set (authentication off).
func (a Auth) IsZero() bool { return a == Auth{} }

// String hides the password: an Auth printed by mistake leaks nothing.
func (a Auth) String() string {
	switch {
	case a.IsZero():
		return "none"
	case a.PasswordFile != "":
		return a.User + " (password in " + a.PasswordFile + ")"
	}
	return a.User + " (password [REDACTED])"
}

// GoString hides the password from %#v too.
func (a Auth) GoString() string { return "cluster.Auth{" + a.String() + "}" }

// secret is the password, read from PasswordFile when set.
func (a Auth) secret() (string, error) {
	if a.PasswordFile == "" {
		return a.Password, nil
	}
	b, err := os.ReadFile(a.PasswordFile)
	if err != nil {
		return "", err
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("password file %s is empty", a.PasswordFile)
	}
	return pw, nil
}

// validate reports what is wrong with a under key (e.g. "cluster.authorization").
func (a Auth) validate(key string, bad func(string, ...any)) {
	if a.IsZero() {
		return
	}
	switch {
	case a.User == "":
		bad("%s.user is required with a password", key)
	case strings.ContainsAny(a.User, " \t\r\n"):
		bad("%s.user %q must not contain spaces", key, a.User)
	}
	switch {
	case a.Password != "" && a.PasswordFile != "":
		bad("%s.password and %s.password_file are exclusive", key, key)
	case a.Password == "" && a.PasswordFile == "":
		bad("%s.user needs %s.password or %s.password_file", key, key, key)
	case strings.HasPrefix(a.Password, "$2"):
		bad("%s.password looks like a bcrypt hash: a node also dials its peers with this password, so it must be the plain text", key)
	}
	// PasswordFile is read at Start, not here: a config is often
	// validated on another machine than the one that has the secret.
}

// RemoteGateway is one other region.
type RemoteGateway struct {
	// Name is the remote region (its gateway name).
	Name string `yaml:"name"`
	// URLs are "nats://host:port" gateway addresses of that region.
	URLs []string `yaml:"urls"`
}

// LeafNodeConfig accepts leaf node connections (hub side).
type LeafNodeConfig struct {
	// Listen is the leaf node listen address "host:port"; empty turns it
	// off, port 0 picks a random port.
	Listen string `yaml:"listen"`
	// Advertise is the "host:port" edges should dial.
	Advertise string `yaml:"advertise"`
	// Users are the accepted edge credentials. Empty means NO
	// authentication: any host that reaches Listen joins the bus with full
	// rights. Only leave it empty on a trusted network.
	Users []LeafUser `yaml:"users"`
}

// LeafUser is one accepted edge credential.
type LeafUser struct {
	// User is the name an edge presents ([LeafConfig.User]).
	User string `yaml:"user"`
	// Password is compared as is, or as a bcrypt hash when it starts with
	// "$2a$" (nats-server's rule).
	Password string `yaml:"password"`
}

// LeafConfig makes this node a leaf of a hub (edge side).
type LeafConfig struct {
	// URLs are the hub's leaf node addresses: nats-leaf://, nats://, tls://,
	// ws:// or wss://.
	URLs []string `yaml:"urls"`
	// User and Password authenticate against the hub's
	// [LeafNodeConfig.Users].
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	// Credentials is a .creds file (JWT + nkey seed) for hubs in operator
	// mode; exclusive with User/Password.
	Credentials string `yaml:"credentials"`
}

var (
	serverNameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
	clusterNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
)

// jetStream reports whether the server runs JetStream.
func (c Config) jetStream() bool { return !c.NoJetStream && len(c.Leaf.URLs) == 0 }

// clustered reports whether nats-server runs this node in clustered mode
// (routes or gateways), where JetStream forms a RAFT meta group.
func (c Config) clustered() bool { return c.Cluster.Listen != "" || c.Gateway.Listen != "" }

// clusterName is the effective cluster name when clustering.
func (c Config) clusterName() string {
	switch {
	case c.Cluster.Name != "":
		return c.Cluster.Name
	case c.Region != "":
		return c.Region
	}
	return DefaultClusterName
}

// Validate reports every configuration mistake it finds, joined, each
// wrapping [ErrInvalidConfig]. It touches nothing but a leaf credentials
// file (which must exist).
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...))
	}
	js := c.jetStream()
	clustering := c.clustered()
	isLeaf := len(c.Leaf.URLs) > 0

	// Server.
	switch {
	case c.Name == "" && (clustering || isLeaf):
		bad("name is required for a clustered, gateway or leaf node: every server that meets another needs a unique name")
	case c.Name != "" && !serverNameRE.MatchString(c.Name):
		bad("name %q: use letters, digits, '.', '_' or '-' (at most 128)", c.Name)
	}
	if strings.ContainsAny(c.Host, " \t\r\n/@?#") {
		bad("host %q is not a host name or IP", c.Host)
	}
	if c.Port < -1 || c.Port > 65535 {
		bad("port %d is out of range (-1 random, 0 default, 1-65535)", c.Port)
	}
	if js && c.StoreDir == "" {
		bad("store_dir is required when JetStream is on")
	}
	if c.MaxMemory < 0 || c.MaxStore < 0 {
		bad("max_memory %d / max_store %d must not be negative", c.MaxMemory, c.MaxStore)
	}
	if c.MaxPayload < 0 || c.MaxPayload > maxPayloadLimit {
		bad("max_payload %d is out of range (0 default, at most %d)", c.MaxPayload, maxPayloadLimit)
	}
	if c.MonitorPort < 0 || c.MonitorPort > 65535 {
		bad("monitor_port %d is out of range", c.MonitorPort)
	}

	// Cluster (routes).
	cc := c.Cluster
	if cc.Listen != "" {
		if _, _, err := splitListen(cc.Listen); err != nil {
			bad("cluster.listen: %v", err)
		}
	}
	if cc.Listen == "" && (cc.Advertise != "" || len(cc.Routes) > 0 || cc.PoolSize != 0) {
		bad("cluster.advertise, cluster.routes and cluster.pool_size need cluster.listen")
	}
	if cc.Advertise != "" {
		if err := checkAdvertise(cc.Advertise); err != nil {
			bad("cluster.advertise: %v", err)
		}
	}
	for i, r := range cc.Routes {
		if u, err := parseURL(r, "nats-route", "nats"); err != nil {
			bad("cluster.routes[%d]: %v", i, err)
		} else if u.User != nil {
			bad("cluster.routes[%d] %q: credentials in a route URL end up in process listings and logs; set cluster.authorization (every member presents it on its routes)", i, u.Redacted())
		}
	}
	if cc.Listen == "" && !cc.Authorization.IsZero() {
		bad("cluster.authorization needs cluster.listen")
	}
	cc.Authorization.validate("cluster.authorization", bad)
	if cc.PoolSize < -1 {
		bad("cluster.pool_size %d: use -1 (no pooling), 0 (default) or a positive size", cc.PoolSize)
	}
	if cc.Name != "" && !clusterNameRE.MatchString(cc.Name) {
		bad("cluster.name %q: use letters, digits, '_' or '-' (at most 64)", cc.Name)
	}
	if c.Region != "" && !clusterNameRE.MatchString(c.Region) {
		bad("region %q: use letters, digits, '_' or '-' (at most 64)", c.Region)
	}
	if c.Region != "" && cc.Name != "" && c.Region != cc.Name {
		bad("region %q and cluster.name %q differ: the region is the cluster name (set one of them)", c.Region, cc.Name)
	}
	switch {
	case js && cc.Listen != "" && len(cc.Routes) == 0:
		bad("cluster.routes is empty: a JetStream cluster node needs the routes of its members (list every member, this node included); for one node, drop the cluster settings and run it standalone")
	case js && cc.Listen != "" && c.Gateway.Listen == "" && c.Peers() == 1:
		// nats-server bootstraps a meta group of at least 2 servers and
		// starts its RAFT only once a route, gateway or leaf connection
		// is up (bootstrapRaftNode, raft.run): a cluster of one waits
		// for ever.
		bad("cluster.routes name only this node: a JetStream cluster needs another member to elect its meta leader, so a cluster of one never starts; list the other members' routes too (this node waits for them), or drop the cluster settings and run one node standalone")
	}

	// Gateways (regions).
	gw := c.Gateway
	if gw.Listen != "" {
		if _, _, err := splitListen(gw.Listen); err != nil {
			bad("gateway.listen: %v", err)
		}
		if c.Region == "" {
			bad("gateway.listen needs region: the region is the gateway name")
		}
	}
	if gw.Listen == "" && (gw.Advertise != "" || len(gw.Gateways) > 0 || !gw.Authorization.IsZero()) {
		bad("gateway.advertise, gateway.gateways and gateway.authorization need gateway.listen")
	}
	gw.Authorization.validate("gateway.authorization", bad)
	if gw.Advertise != "" {
		if err := checkAdvertise(gw.Advertise); err != nil {
			bad("gateway.advertise: %v", err)
		}
	}
	seen := map[string]bool{}
	for i, g := range gw.Gateways {
		switch {
		case g.Name == "":
			bad("gateway.gateways[%d]: name is required", i)
		case !clusterNameRE.MatchString(g.Name):
			bad("gateway.gateways[%d]: name %q: use letters, digits, '_' or '-'", i, g.Name)
		case seen[g.Name]:
			bad("gateway.gateways[%d]: duplicate gateway name %q", i, g.Name)
		}
		seen[g.Name] = true
		if len(g.URLs) == 0 && g.Name != c.Region {
			bad("gateway.gateways[%d] %q: urls is empty", i, g.Name)
		}
		for j, u := range g.URLs {
			if pu, err := parseURL(u, "nats"); err != nil {
				bad("gateway.gateways[%d].urls[%d]: %v", i, j, err)
			} else if pu.User != nil {
				bad("gateway.gateways[%d].urls[%d] %q: credentials in a gateway URL end up in process listings and logs; set gateway.authorization (every region presents it when it dials)", i, j, pu.Redacted())
			}
		}
	}

	// Leaf nodes, hub side.
	ln := c.LeafNodes
	if ln.Listen != "" {
		if _, _, err := splitListen(ln.Listen); err != nil {
			bad("leafnodes.listen: %v", err)
		}
	}
	if ln.Listen == "" && (ln.Advertise != "" || len(ln.Users) > 0) {
		bad("leafnodes.advertise and leafnodes.users need leafnodes.listen")
	}
	if ln.Advertise != "" {
		if err := checkAdvertise(ln.Advertise); err != nil {
			bad("leafnodes.advertise: %v", err)
		}
	}
	users := map[string]bool{}
	for i, u := range ln.Users {
		switch {
		case u.User == "" || u.Password == "":
			bad("leafnodes.users[%d]: user and password are both required", i)
		case users[u.User]:
			bad("leafnodes.users[%d]: duplicate user %q", i, u.User)
		}
		users[u.User] = true
	}

	// Leaf, edge side.
	lf := c.Leaf
	if isLeaf {
		if clustering || cc.Name != "" || c.Region != "" {
			bad("leaf and cluster/gateway/region are exclusive: a leaf joins its hub's cluster through the leaf connection")
		}
		for i, u := range lf.URLs {
			pu, err := parseURL(u, "nats-leaf", "nats", "tls", "ws", "wss")
			if err != nil {
				bad("leaf.urls[%d]: %v", i, err)
				continue
			}
			if pu.User != nil && (lf.User != "" || lf.Credentials != "") {
				bad("leaf.urls[%d]: credentials both in the URL and in leaf.user/leaf.credentials", i)
			}
		}
	} else if lf.User != "" || lf.Password != "" || lf.Credentials != "" {
		bad("leaf.user, leaf.password and leaf.credentials need leaf.urls")
	}
	if (lf.User == "") != (lf.Password == "") {
		bad("leaf.user and leaf.password go together")
	}
	if lf.Credentials != "" {
		if lf.User != "" {
			bad("leaf.credentials and leaf.user are exclusive")
		}
		if st, err := os.Stat(lf.Credentials); err != nil {
			bad("leaf.credentials: %v", err)
		} else if st.IsDir() {
			bad("leaf.credentials %q is a directory", lf.Credentials)
		}
	}
	return errors.Join(errs...)
}

// Peers is the number of distinct cluster members implied by
// Cluster.Routes, this node included (1 when not clustered). A route is
// recognised as this node when it names Cluster.Advertise or Cluster.Listen
// (or, for a wildcard listen host, a loopback or local address on the listen
// port). Unparsable routes are not counted.
func (c Config) Peers() int { return len(c.otherRoutes()) + 1 }

// otherRoutes are the routes of Cluster.Routes that name another member,
// one per member, in their order (nil when not clustered).
func (c Config) otherRoutes() []string {
	if c.Cluster.Listen == "" {
		return nil
	}
	self := c.isSelf()
	set := map[string]bool{}
	var out []string
	for _, r := range c.Cluster.Routes {
		u, err := parseURL(r, "nats-route", "nats")
		if err != nil {
			continue
		}
		key := normHostPort(u.Hostname(), u.Port())
		if !self(key) && !set[key] {
			set[key] = true
			out = append(out, r)
		}
	}
	return out
}

// Replicas is the replication factor for streams and KV buckets on this
// node's cluster: 3 when [Config.Peers] is at least 3, else 1. A leaf has no
// JetStream of its own and answers 1; ask the hub.
func (c Config) Replicas() int {
	if c.Peers() >= 3 {
		return 3
	}
	return 1
}

// isSelf returns a predicate telling whether a normalised route host:port
// is this node.
func (c Config) isSelf() func(string) bool {
	var exact []string
	if c.Cluster.Advertise != "" {
		if h, p, err := net.SplitHostPort(c.Cluster.Advertise); err == nil {
			exact = append(exact, normHostPort(h, p))
		}
	}
	lh, lp, err := net.SplitHostPort(c.Cluster.Listen)
	if err != nil || lp == "0" {
		lp = ""
	}
	wildcard := lh == "" || lh == "0.0.0.0" || lh == "::"
	if lp != "" && !wildcard {
		exact = append(exact, normHostPort(lh, lp))
	}
	var local map[string]bool
	return func(key string) bool {
		for _, e := range exact {
			if key == e {
				return true
			}
		}
		if lp == "" || !wildcard {
			return false
		}
		h, p, _ := net.SplitHostPort(key)
		if p != normPort(lp) {
			return false
		}
		if local == nil {
			local = localHosts()
		}
		return local[h]
	}
}

// localHosts are the names and addresses of this machine, normalised.
func localHosts() map[string]bool {
	m := map[string]bool{"127.0.0.1": true, "::1": true}
	if h, err := os.Hostname(); err == nil {
		m[strings.ToLower(h)] = true
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				m[ipn.IP.String()] = true
			}
		}
	}
	return m
}

// normHostPort makes host:port comparable: lower case, "localhost" as
// 127.0.0.1, IPs in canonical form, the port without leading zeros.
func normHostPort(host, port string) string {
	host = strings.ToLower(host)
	if host == "localhost" {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	}
	return net.JoinHostPort(host, normPort(port))
}

func normPort(p string) string {
	if n, err := strconv.Atoi(p); err == nil {
		return strconv.Itoa(n)
	}
	return p
}

// splitListen parses a listen address "host:port"; port 0 means random and
// is returned as -1 (nats-server's RANDOM_PORT); an empty host means all
// interfaces.
func splitListen(s string) (string, int, error) {
	host, ps, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port: %v", s, unwrapAddrErr(err))
	}
	if strings.ContainsAny(host, " \t\r\n/@?#") {
		return "", 0, fmt.Errorf("%q: bad host %q", s, host)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port %q is not 0-65535", s, ps)
	}
	if port == 0 {
		port = -1
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

// checkAdvertise validates an advertised "host:port" (a real port, a host).
func checkAdvertise(s string) error {
	host, ps, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", s, unwrapAddrErr(err))
	}
	if host == "" || strings.ContainsAny(host, " \t\r\n/@?#") {
		return fmt.Errorf("%q: a host is required", s)
	}
	if port, err := strconv.Atoi(ps); err != nil || port < 1 || port > 65535 {
		return fmt.Errorf("%q: port %q is not 1-65535", s, ps)
	}
	return nil
}

// parseURL parses scheme://host:port with one of the given schemes, a host
// and a real port, and nothing after the port.
func parseURL(raw string, schemes ...string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// Whatever precedes the last '@' may be a password.
		if i := strings.LastIndex(raw, "@"); i >= 0 {
			raw = "[REDACTED]" + raw[i:]
		}
		return nil, fmt.Errorf("%q is not a URL", raw)
	}
	s := u.Redacted() // errors never repeat a password
	ok := false
	for _, sc := range schemes {
		if strings.EqualFold(u.Scheme, sc) {
			ok = true
		}
	}
	if !ok {
		return nil, fmt.Errorf("%q: scheme must be %s://", s, strings.Join(schemes, ":// or "))
	}
	if u.Hostname() == "" || u.Opaque != "" {
		return nil, fmt.Errorf("%q: a host is required", s)
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("%q: a port 1-65535 is required", s)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q: nothing may follow host:port", s)
	}
	return u, nil
}

// unwrapAddrErr drops the address that net.AddrError repeats.
func unwrapAddrErr(err error) string {
	var ae *net.AddrError
	if errors.As(err, &ae) {
		return ae.Err
	}
	return err.Error()
}
