// Package services starts the engine's own functions that a node serves
// beside its worker modules, as `iii up` does: state::* on the state
// store, queue::* and a consumer of the default queue, topic::*, cron::*
// with its scheduler, and, when asked, the HTTP route functions with their
// gateway (http::*). Serving the gateway on a listener is the caller's:
// [Running.Gateway] is an http.Handler. [Running.Close] (and a Start that
// fails partway) first drains the default queue's consumer (the jobs it
// runs finish while every function they may call is still served), then
// stops serving each group of functions before it closes the scheduler or
// gateway they drive.
//
// Tests that compose a whole node (the e2e package) start it with the same
// call as cmd/iii, so the two cannot drift apart.
package services
