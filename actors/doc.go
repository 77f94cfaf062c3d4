// Package actors holds the proto.actor side of iii: the session grain
// (actors/session) that runs the pure turn state machine (actors/turn)
// and performs its effects through narrow ports.
package actors
