// Package std imports the default worker stack: a blank import of each
// worker module, so that linking this package registers them all with
// workers.Register. cmd/iii imports only this package; a thinner binary
// imports fewer modules.
package std
