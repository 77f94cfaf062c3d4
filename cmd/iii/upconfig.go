package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/iii-on-nats/iii/cluster"
)

// loadFileConfig reads `iii up --config FILE` (cluster.NodeFile) strictly:
// an unknown key is an error.
func loadFileConfig(path string) (cluster.NodeFile, error) {
	f, err := cluster.LoadNodeFile(path)
	if err != nil {
		return f, fmt.Errorf("--config: %w", err)
	}
	return f, nil
}

// topology is the clustering part of upConfig.
type topology struct {
	name      string
	cluster   cluster.ClusterConfig
	region    string
	gateway   cluster.GatewayConfig
	leafnodes cluster.LeafNodeConfig
	leaf      cluster.LeafConfig
	join      string
	creds     string
	replicas  int
	actor     cluster.ActorConfig
	gateways  []string // --gateway NAME=URL[,URL]
	// clusterPasswordFile and gatewayPasswordFile are
	// --cluster-password-file and --gateway-password-file: they win over
	// the environment and the --config file (peerAuth).
	clusterPasswordFile string
	gatewayPasswordFile string
}

// Environment variables holding the route and gateway passwords, for
// deployments that inject secrets that way: a password is never a flag
// (process listings show flags to every user of the machine).
const (
	envClusterPassword = "III_CLUSTER_PASSWORD"
	envGatewayPassword = "III_GATEWAY_PASSWORD"
)

// peerAuth is the route or gateway credential of a node: the user from
// --X-user or the file, the password from --X-password-file, else the
// environment variable env (when a user is set), else the file's
// password or password_file.
func peerAuth(a cluster.Auth, flagFile, env string) cluster.Auth {
	switch {
	case flagFile != "":
		a.Password, a.PasswordFile = "", flagFile
	case a.User != "" && os.Getenv(env) != "":
		a.Password, a.PasswordFile = os.Getenv(env), ""
	}
	return a
}

// clustered says whether this node shares its sessions with other nodes:
// then the session grains form a proto.actor cluster.
func (t topology) clustered() bool {
	return t.cluster.Name != "" || t.region != "" || len(t.leaf.URLs) > 0 || t.join != ""
}

// grainCluster is the proto.actor cluster name of the session grains: one
// grain cluster for every node on the bus, whatever its NATS cluster or
// region (the nodes share one turn-step consumer, so they must share the
// grains' placement too).
func (t topology) grainCluster() string { return "iii" }

// parseGateways turns --gateway NAME=URL[,URL] into remote gateways.
func parseGateways(specs []string) ([]cluster.RemoteGateway, error) {
	var out []cluster.RemoteGateway
	for _, s := range specs {
		name, urls, ok := strings.Cut(s, "=")
		if !ok || name == "" || urls == "" {
			return nil, fmt.Errorf("--gateway %q: want NAME=URL[,URL]", s)
		}
		out = append(out, cluster.RemoteGateway{Name: name, URLs: strings.Split(urls, ",")})
	}
	return out, nil
}

// addTopologyFlags declares the clustering flags.
func addTopologyFlags(cmd *cobra.Command, t *topology) {
	f := cmd.Flags()
	// --gateways is another spelling of --gateway (nats-server's config
	// block is "gateways").
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "gateways" {
			name = "gateway"
		}
		return pflag.NormalizedName(name)
	})
	f.StringVar(&t.name, "name", "", "node (server) name, unique in the cluster and supercluster (required when clustering)")
	f.StringVar(&t.cluster.Name, "cluster", "", "NATS cluster name: form a cluster with --routes (session grains are shared)")
	f.StringVar(&t.cluster.Listen, "cluster-listen", "", "route listener HOST:PORT (default 0.0.0.0:6222 with --cluster)")
	f.StringVar(&t.cluster.Advertise, "cluster-advertise", "", "route address other nodes dial")
	f.StringSliceVar(&t.cluster.Routes, "routes", nil, "seed routes nats-route://HOST:PORT,... (may include this node)")
	f.StringVar(&t.cluster.Authorization.User, "cluster-user", "", "route user: members accept and present only this user and its password (same on every member)")
	f.StringVar(&t.clusterPasswordFile, "cluster-password-file", "", "file holding the route password (else env "+envClusterPassword+", else cluster.authorization in --config)")
	f.StringVar(&t.region, "region", "", "region of this node: the gateway name (equal to the cluster name); sessions \"<region>.<name>\" are homed in it")
	f.StringVar(&t.gateway.Listen, "gateway-listen", "", "gateway listener HOST:PORT (default 0.0.0.0:7222 with --gateway)")
	f.StringVar(&t.gateway.Advertise, "gateway-advertise", "", "gateway address other regions dial")
	f.StringArrayVar(&t.gateways, "gateway", nil, "remote region NAME=URL[,URL] (repeatable; also spelled --gateways)")
	f.StringVar(&t.gateway.Authorization.User, "gateway-user", "", "gateway user: regions accept and present only this user and its password (same in every region)")
	f.StringVar(&t.gatewayPasswordFile, "gateway-password-file", "", "file holding the gateway password (else env "+envGatewayPassword+", else gateway.authorization in --config)")
	f.StringVar(&t.leafnodes.Listen, "leafnode-listen", "", "accept leaf nodes (edge machines) on HOST:PORT")
	f.StringSliceVar(&t.leaf.URLs, "leaf", nil, "run as a leaf node of a hub: nats-leaf://[USER:PASS@]HOST:PORT (no local JetStream)")
	f.StringVar(&t.leaf.Credentials, "leaf-creds", "", "credentials file of the leaf connection")
	f.StringVar(&t.join, "join", "", "use an existing NATS deployment at URL and embed no server")
	f.StringVar(&t.creds, "creds", "", "credentials file for --join")
	f.IntVar(&t.replicas, "replicas", 0, "stream and KV replicas (default: 3 when the cluster has 3 or more nodes, else 1)")
	f.StringVar(&t.actor.Listen, "actor-listen", "", "session grains' proto.actor remote HOST:PORT (default 127.0.0.1:0)")
	f.StringVar(&t.actor.Advertise, "actor-advertise", "", "address other nodes dial for this node's grains")
}

// mergeFile fills cfg from fc for every flag the command line left unset.
func mergeFile(cmd *cobra.Command, cfg *upConfig, fc cluster.NodeFile, sets *[]string) {
	unset := func(name string) bool { return !cmd.Flags().Changed(name) }
	str := func(name string, dst *string, v string) {
		if unset(name) && v != "" {
			*dst = v
		}
	}
	t := &cfg.topo
	str("name", &t.name, fc.Name)
	str("home", &cfg.home, fc.Home)
	str("listen", &cfg.listen, fc.Listen)
	if unset("http") && fc.HTTP != nil {
		cfg.httpAddr = *fc.HTTP
	}
	if unset("monitor-port") && fc.MonitorPort != 0 {
		cfg.monitorPort = fc.MonitorPort
	}
	str("metrics", &cfg.metricsAddr, fc.Metrics)
	if unset("no-traces") && fc.NoTraces {
		cfg.noTraces = true
	}
	if unset("heap-floor-mib") && fc.HeapFloorMiB != nil {
		cfg.heapFloorMiB = *fc.HeapFloorMiB
	}
	if unset("max-payload") && fc.MaxPayload != 0 {
		cfg.maxPayload = fc.MaxPayload
	}
	str("cluster", &t.cluster.Name, fc.Cluster.Name)
	str("cluster-listen", &t.cluster.Listen, fc.Cluster.Listen)
	str("cluster-advertise", &t.cluster.Advertise, fc.Cluster.Advertise)
	if unset("routes") && len(fc.Cluster.Routes) > 0 {
		t.cluster.Routes = fc.Cluster.Routes
	}
	if fc.Cluster.PoolSize != 0 {
		t.cluster.PoolSize = fc.Cluster.PoolSize
	}
	str("cluster-user", &t.cluster.Authorization.User, fc.Cluster.Authorization.User)
	t.cluster.Authorization.Password = fc.Cluster.Authorization.Password
	t.cluster.Authorization.PasswordFile = fc.Cluster.Authorization.PasswordFile
	str("region", &t.region, fc.Region)
	str("gateway-listen", &t.gateway.Listen, fc.Gateway.Listen)
	str("gateway-advertise", &t.gateway.Advertise, fc.Gateway.Advertise)
	if unset("gateway") {
		t.gateway.Gateways = append(t.gateway.Gateways, fc.Gateway.Gateways...)
	}
	str("gateway-user", &t.gateway.Authorization.User, fc.Gateway.Authorization.User)
	t.gateway.Authorization.Password = fc.Gateway.Authorization.Password
	t.gateway.Authorization.PasswordFile = fc.Gateway.Authorization.PasswordFile
	str("leafnode-listen", &t.leafnodes.Listen, fc.LeafNodes.Listen)
	t.leafnodes.Advertise = fc.LeafNodes.Advertise
	t.leafnodes.Users = fc.LeafNodes.Users
	if unset("leaf") && len(fc.Leaf.URLs) > 0 {
		t.leaf.URLs = fc.Leaf.URLs
	}
	str("leaf-creds", &t.leaf.Credentials, fc.Leaf.Credentials)
	if t.leaf.User == "" {
		t.leaf.User, t.leaf.Password = fc.Leaf.User, fc.Leaf.Password
	}
	str("join", &t.join, fc.Join)
	str("creds", &t.creds, fc.Creds)
	if unset("replicas") && fc.Replicas != 0 {
		t.replicas = fc.Replicas
	}
	str("actor-listen", &t.actor.Listen, fc.Actor.Listen)
	str("actor-advertise", &t.actor.Advertise, fc.Actor.Advertise)
	if unset("workers") && len(fc.Workers) > 0 {
		cfg.modules = fc.Workers
	}
	if len(fc.Set) > 0 {
		// File settings first, so a --set for the same key wins.
		keys := make([]string, 0, len(fc.Set))
		for k := range fc.Set {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		pairs := make([]string, 0, len(keys)+len(*sets))
		for _, k := range keys {
			pairs = append(pairs, k+"="+fc.Set[k])
		}
		*sets = append(pairs, *sets...)
	}
}

// refuseIgnored refuses what `iii up` would otherwise accept and ignore,
// given as a flag of cmd or a key of the --config file fc: --nats and
// --timeout (the client commands' server URL and call timeout), the
// embedded server's settings with --join, which embeds none, and --creds
// without it.
func refuseIgnored(cmd *cobra.Command, fc cluster.NodeFile, t topology) error {
	if f := cmd.Flags().Lookup("nats"); f != nil && f.Changed {
		return fmt.Errorf("--nats is for the client commands: iii up runs its own server (--listen) or uses an existing one with --join URL")
	}
	if err := refuseClientTimeout(cmd, "iii up"); err != nil {
		return err
	}
	// given names a flag as it was given: on the command line, else in
	// the file ("" when neither).
	given := func(flag, key string, inFile bool) string {
		switch {
		case cmd.Flags().Changed(flag):
			return "--" + flag
		case inFile:
			return key + " (--config)"
		}
		return ""
	}
	if t.join == "" {
		if g := given("creds", "creds", fc.Creds != ""); g != "" {
			return fmt.Errorf("%s needs --join: it is the credentials of the connection to an existing NATS deployment", g)
		}
		return nil
	}
	var ignored []string
	for _, g := range []string{
		given("listen", "listen", fc.Listen != ""),
		given("monitor-port", "monitor_port", fc.MonitorPort != 0),
		given("max-payload", "max_payload", fc.MaxPayload != 0),
		given("cluster", "cluster.name", fc.Cluster.Name != ""),
		given("cluster-listen", "cluster.listen", fc.Cluster.Listen != ""),
		given("cluster-advertise", "cluster.advertise", fc.Cluster.Advertise != ""),
		given("routes", "cluster.routes", len(fc.Cluster.Routes) > 0),
		given("cluster-user", "cluster.authorization", !fc.Cluster.Authorization.IsZero()),
		given("cluster-password-file", "", false),
		given("gateway-listen", "gateway.listen", fc.Gateway.Listen != ""),
		given("gateway-advertise", "gateway.advertise", fc.Gateway.Advertise != ""),
		given("gateway", "gateway.gateways", len(fc.Gateway.Gateways) > 0),
		given("gateway-user", "gateway.authorization", !fc.Gateway.Authorization.IsZero()),
		given("gateway-password-file", "", false),
		given("", "cluster.pool_size", fc.Cluster.PoolSize != 0),
		given("leafnode-listen", "leafnodes.listen", fc.LeafNodes.Listen != ""),
		given("", "leafnodes.advertise", fc.LeafNodes.Advertise != ""),
		given("", "leafnodes.users", len(fc.LeafNodes.Users) > 0),
		given("leaf", "leaf.urls", len(fc.Leaf.URLs) > 0),
		given("", "leaf.user", fc.Leaf.User != "" || fc.Leaf.Password != ""),
		given("leaf-creds", "leaf.credentials", fc.Leaf.Credentials != ""),
	} {
		if g != "" {
			ignored = append(ignored, g)
		}
	}
	if len(ignored) > 0 {
		return fmt.Errorf("--join embeds no server, so %s would be ignored: set them on the NATS deployment, or drop --join", strings.Join(ignored, ", "))
	}
	return nil
}

// refuseClientTimeout refuses the global --timeout on cmd, a command
// (named name) that makes no client call it would bound: the workers'
// own timeouts are their settings (--set), so a --timeout given there
// was accepted and changed nothing.
func refuseClientTimeout(cmd *cobra.Command, name string) error {
	if f := cmd.Flags().Lookup("timeout"); f != nil && f.Changed {
		return fmt.Errorf("--timeout is the client commands' call timeout: %s makes no such call (a worker's timeouts are its settings, --set WORKER.KEY=VALUE)", name)
	}
	return nil
}

// checkRoutes refuses route settings without a cluster name: the server
// would route to its peers, but the node would keep its name "iii" and its
// session grains to itself (a half-clustered node).
func (t topology) checkRoutes() error {
	if t.cluster.Name != "" || t.region != "" {
		return nil
	}
	var set []string
	if t.cluster.Listen != "" {
		set = append(set, "--cluster-listen")
	}
	if t.cluster.Advertise != "" {
		set = append(set, "--cluster-advertise")
	}
	if len(t.cluster.Routes) > 0 {
		set = append(set, "--routes")
	}
	if t.cluster.PoolSize != 0 {
		set = append(set, "cluster.pool_size")
	}
	if !t.cluster.Authorization.IsZero() || t.clusterPasswordFile != "" {
		set = append(set, "--cluster-user")
	}
	if len(set) == 0 {
		return nil
	}
	verb := "needs"
	if len(set) > 1 {
		verb = "need"
	}
	return fmt.Errorf("%s %s --cluster NAME (cluster.name in --config), or --region: without a cluster name the node would route to its peers but not share its sessions", strings.Join(set, ", "), verb)
}

// serverConfig is the embedded server's configuration for this node.
func (t topology) serverConfig(cfg upConfig, host string, port int, storeDir string) (cluster.Config, error) {
	if err := t.checkRoutes(); err != nil {
		return cluster.Config{}, err
	}
	gws, err := parseGateways(t.gateways)
	if err != nil {
		return cluster.Config{}, err
	}
	c := cluster.Config{
		Name: t.name, Host: host, Port: port, StoreDir: storeDir,
		MonitorPort: cfg.monitorPort,
		MaxPayload:  cfg.maxPayload,
		Logger:      cfg.logger.With("component", "nats-server"),
		Cluster:     t.cluster,
		Region:      t.region,
		Gateway:     t.gateway,
		LeafNodes:   t.leafnodes,
		Leaf:        t.leaf,
	}
	c.Gateway.Gateways = append(c.Gateway.Gateways, gws...)
	c.Cluster.Authorization = peerAuth(c.Cluster.Authorization, t.clusterPasswordFile, envClusterPassword)
	c.Gateway.Authorization = peerAuth(c.Gateway.Authorization, t.gatewayPasswordFile, envGatewayPassword)
	if c.Cluster.Name != "" && c.Cluster.Listen == "" {
		c.Cluster.Listen = "0.0.0.0:6222"
	}
	if len(c.Gateway.Gateways) > 0 && c.Gateway.Listen == "" {
		c.Gateway.Listen = "0.0.0.0:7222"
	}
	if c.Name == "" {
		// A cluster, a region or a hub tells its nodes apart by name.
		c.Name = cluster.DefaultName
		if t.clustered() {
			if h, err := os.Hostname(); err == nil && h != "" {
				c.Name = h
			}
		}
	}
	return c, c.Validate()
}
