package engine

import (
	"github.com/nats-io/nats.go"
)

// watchConn follows the connection's status for the engine's life: it logs
// a loss once (however many reconnect attempts follow) and the return
// once, and when the connection closes for good (its reconnects used up,
// or closed by its owner) it ends the contexts of running handlers, whose
// replies can no longer be sent. nats.go itself subscribes again on
// reconnect: functions, the catalog's $SRV endpoints and JetStream
// subscriptions need nothing from the engine.
func (e *Engine) watchConn() {
	ch := e.nc.StatusChanged(nats.RECONNECTING, nats.CONNECTED, nats.CLOSED)
	if e.nc.IsClosed() { // closed before the listener was in place
		e.nc.RemoveStatusListener(ch)
		e.connClosed()
		return
	}
	go func() {
		defer e.nc.RemoveStatusListener(ch)
		lost := false
		for {
			select {
			case <-e.base.Done():
				return
			case st := <-ch:
				switch st {
				case nats.RECONNECTING:
					if !lost {
						lost = true
						e.opts.logger.Warn("nats connection lost; reconnecting", "error", e.nc.LastError(), "max_reconnects", e.nc.Opts.MaxReconnect)
					}
				case nats.CONNECTED:
					if lost {
						lost = false
						e.opts.logger.Info("nats connection restored", "server", e.nc.ConnectedUrlRedacted(), "reconnects", e.nc.Stats().Reconnects)
					}
				case nats.CLOSED:
					e.connClosed()
					return
				}
			}
		}
	}()
}

// connClosed ends the handlers' contexts after the connection closed.
func (e *Engine) connClosed() {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if !closed {
		// With an error, the connection gave up (reconnects used up, auth
		// revoked): worth an operator's attention. Without, its owner
		// closed it before the engine, as a program that exits may.
		if err := e.nc.LastError(); err != nil {
			e.opts.logger.Error("nats connection closed; running handlers canceled", "error", err)
		} else {
			e.opts.logger.Info("nats connection closed by its owner before the engine; running handlers canceled")
		}
	}
	e.cancel()
}
