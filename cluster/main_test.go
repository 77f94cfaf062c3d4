package cluster_test

import (
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func TestMain(m *testing.M) {
	// nats-server waits 1 s before soliciting gateways. By then the JetStream
	// meta RAFT campaign timers (100-800 ms) of both regions have expired, so
	// both campaign the moment the gateway connects, the votes split, and the
	// next election comes only after the 4-9 s election timeout. A short
	// solicit delay lets one campaign win first. Process-global: tests only.
	server.SetGatewaysSolicitDelay(20 * time.Millisecond)
	os.Exit(m.Run())
}
