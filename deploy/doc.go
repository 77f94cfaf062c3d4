// Package deploy holds the files that run iii beyond one laptop: configs
// for a 3-node cluster and a 3-region supercluster, an edge (leaf) node,
// systemd units and Kubernetes manifests. README.md in this folder is the
// operations guide that explains them; the Go side is only [Files], the
// same files embedded, and the tests that keep them honest.
//
// # Layout
//
//	nats/cluster-3node/   nats-server configs, 3 nodes, JetStream R3 (for `iii up --join`)
//	nats/supercluster/    nats-server configs, regions east, west, eu × 3 nodes, gateways
//	iii/                  `iii up --config` YAML: single node, 3-node cluster,
//	                      supercluster, edge (leaf) node, --join
//	systemd/              iii.service, iii@.service, drop-ins, environment example
//	kubernetes/           StatefulSet, Services, PodDisruptionBudget, ConfigMap, kustomization
//
// # Lifecycle
//
// Nothing runs here. Operators copy the files (or `kubectl apply -k
// deploy/kubernetes`) and edit host names, sizes and secrets. The tests
// parse every file with the code that will read it (nats-server's config
// parser, a strict YAML decoder mirroring `iii up --config`, the cluster
// package's validation), check that the files agree with each other
// (routes, gateways, ports, labels), that README.md's commands create the
// password files and Secrets the files name (readable by the node's user,
// kept on a second run), and boot the 3-node NATS cluster from
// its configs to run the operations guide's nats CLI commands against it.
//
// # Example
//
//	data, err := fs.ReadFile(deploy.Files, "iii/cluster-3node/n1.yaml")
package deploy

import "embed"

// Files holds this folder's configuration files under their paths relative
// to it, e.g. "nats/cluster-3node/n1.conf" or "kubernetes/statefulset.yaml"
// (README.md and the Go files are not included).
//
//go:embed nats iii systemd kubernetes
var Files embed.FS
