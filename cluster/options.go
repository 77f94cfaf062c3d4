package cluster

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/iii-on-nats/iii/cluster/freeport"
)

// options translates a validated Config into nats-server options.
func (c Config) options() (*server.Options, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	o := &server.Options{
		ServerName: c.Name,
		Host:       c.Host,
		Port:       c.Port,
		JetStream:  c.jetStream(),
		MaxPayload: c.MaxPayload,
		NoSigs:     true,
		NoLog:      c.Logger == nil,
		Debug:      c.Debug,
	}
	if o.ServerName == "" {
		o.ServerName = DefaultName
	}
	if o.Host == "" {
		o.Host = DefaultHost
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.JetStream {
		o.JetStreamDomain = JetStreamDomain
		o.StoreDir = c.StoreDir
		o.JetStreamMaxMemory = orDefault(c.MaxMemory, DefaultMaxMemory)
		o.JetStreamMaxStore = orDefault(c.MaxStore, DefaultMaxStore)
	}
	if c.MonitorPort > 0 {
		o.HTTPHost = o.Host
		o.HTTPPort = c.MonitorPort
	}

	if cc := c.Cluster; cc.Listen != "" {
		host, port, _ := splitListen(cc.Listen)
		o.Cluster = server.ClusterOpts{
			Name: c.clusterName(), Host: host, Port: port,
			Advertise: cc.Advertise, PoolSize: cc.PoolSize,
		}
		user, pw, err := credentials("cluster.authorization", cc.Authorization)
		if err != nil {
			return nil, err
		}
		// The server checks Username/Password on routes it accepts and
		// presents them on routes it discovers; an explicit route
		// presents only what its URL carries.
		o.Cluster.Username, o.Cluster.Password = user, pw
		for _, r := range cc.Routes {
			u, _ := parseURL(r, "nats-route", "nats")
			if user != "" {
				u.User = url.UserPassword(user, pw)
			}
			o.Routes = append(o.Routes, u)
		}
	}

	if gw := c.Gateway; gw.Listen != "" {
		host, port, _ := splitListen(gw.Listen)
		o.Gateway = server.GatewayOpts{Name: c.Region, Host: host, Port: port, Advertise: gw.Advertise}
		// The server checks Username/Password on gateways it accepts and
		// presents them on every gateway it dials whose URL has none.
		user, pw, err := credentials("gateway.authorization", gw.Authorization)
		if err != nil {
			return nil, err
		}
		o.Gateway.Username, o.Gateway.Password = user, pw
		o.Cluster.Name = c.Region // nats-server requires gateway name == cluster name
		for _, g := range gw.Gateways {
			if g.Name == c.Region {
				continue
			}
			r := &server.RemoteGatewayOpts{Name: g.Name}
			for _, s := range g.URLs {
				u, _ := parseURL(s, "nats")
				r.URLs = append(r.URLs, u)
			}
			o.Gateway.Gateways = append(o.Gateway.Gateways, r)
		}
		if o.JetStream && c.Cluster.Listen == "" {
			// A one-node region: nats-server refuses a JetStream cluster
			// without configured routes, so route to ourselves on a
			// loopback-only port (the server ignores a route to self).
			ports, err := freeport.Loopback(1)
			if err != nil {
				return nil, fmt.Errorf("%w: route port for a one-node region: %v", ErrInvalidConfig, err)
			}
			port := ports[0]
			o.Cluster.Host, o.Cluster.Port, o.Cluster.NoAdvertise = "127.0.0.1", port, true
			o.Routes = []*url.URL{{Scheme: "nats-route", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}}
		}
	}

	if ln := c.LeafNodes; ln.Listen != "" {
		host, port, _ := splitListen(ln.Listen)
		o.LeafNode.Host, o.LeafNode.Port, o.LeafNode.Advertise = host, port, ln.Advertise
		for _, u := range ln.Users {
			o.LeafNode.Users = append(o.LeafNode.Users, &server.User{Username: u.User, Password: u.Password})
		}
	}

	if lf := c.Leaf; len(lf.URLs) > 0 {
		r := &server.RemoteLeafOpts{Credentials: lf.Credentials}
		for _, s := range lf.URLs {
			u, _ := parseURL(s, "nats-leaf", "nats", "tls", "ws", "wss")
			if lf.User != "" {
				u.User = url.UserPassword(lf.User, lf.Password)
			}
			if sc := strings.ToLower(u.Scheme); sc == "tls" || sc == "wss" {
				r.TLS = true
			}
			r.URLs = append(r.URLs, u)
		}
		o.LeafNode.Remotes = []*server.RemoteLeafOpts{r}
	}
	return o, nil
}

// credentials resolves a (validated) Auth: "" user when off.
func credentials(key string, a Auth) (user, password string, err error) {
	if a.User == "" {
		return "", "", nil
	}
	pw, err := a.secret()
	if err != nil {
		return "", "", fmt.Errorf("%w: %s: %v", ErrInvalidConfig, key, err)
	}
	return a.User, pw, nil
}

// edgeJSMappings are the subject mappings of a leaf's global account that
// carry its clients' plain JetStream traffic to the hub. nats-server denies
// $JS.API.>, $KV.> and $OBJ.> on every leaf connection of a non-system
// account (unless the system account is shared over the leaf), but lets
// the domain-prefixed form through, and a hub with a domain maps
// $JS.<domain>.API.… back to $JS.API.…, $KV.… and $OBJ.… (see
// generateJSMappingTable in nats-server's jetstream_api.go).
var edgeJSMappings = map[string]string{
	"$JS.API.>": "$JS." + JetStreamDomain + ".API.>",
	"$KV.>":     "$JS." + JetStreamDomain + ".API.$KV.>",
	"$OBJ.>":    "$JS." + JetStreamDomain + ".API.$OBJ.>",
}

// orDefault returns v, or def when v is zero.
func orDefault(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}
