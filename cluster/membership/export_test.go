package membership

import "github.com/asynkron/protoactor-go/cluster"

// StartForTest starts p as member self (a client when self is nil) of
// clusterName without proto.actor; publish receives the topologies.
func (p *Provider) StartForTest(clusterName string, self *Entry, publish func(cluster.Members)) error {
	return p.start(clusterName, self, publish)
}

// Crash simulates a crash: heartbeats and the watch stop, the entry stays
// until it ages out.
func (p *Provider) Crash() { _ = p.stop(false) }

// DecodeEntry is decodeEntry.
var DecodeEntry = decodeEntry

// Encode is encode.
func (e Entry) Encode() ([]byte, error) { return e.encode() }
