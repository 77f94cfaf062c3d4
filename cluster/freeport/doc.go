// Package freeport picks free loopback TCP ports for servers that must
// know their port before they start: a nats-server's route port (its own
// cluster's routes list it), a gateway behind a proxy.
//
// A port picked with ":0" and released goes back to the kernel's
// ephemeral range, where any outgoing connection's local end or another
// server on a random port can take it before the server meant to listen
// on it binds it; a nats-server whose route or gateway port is taken
// never becomes ready. [Loopback] therefore picks from below that range
// (/proc/sys/net/ipv4/ip_local_port_range), which the kernel never hands
// out by itself, and falls back to ":0" where the range cannot be read.
package freeport
