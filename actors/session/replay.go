package session

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"

	"github.com/iii-on-nats/iii/actors/turn"
	"github.com/iii-on-nats/iii/agent"
)

// storedEffects returns the ids of the effects in rec's outbox that a dead
// activation stored already: the transcript appends hist (the transcript
// just loaded) ends with, and the events the Events port finds in the
// stream ([StoredEvents]). Delivering them again relied on the streams'
// duplicate windows alone, which a node restarted later than that no
// longer has; the grain skips them instead. nil when there are none.
func (g *grain) storedEffects(ctx context.Context, rec turn.Record, hist []agent.Message) (map[string]bool, error) {
	var (
		appends []turn.Effect
		events  []string
	)
	for _, e := range rec.Outbox {
		switch {
		case e.Kind == turn.EffectAppendHistory && len(e.Messages) > 0:
			appends = append(appends, e)
		case e.Kind == turn.EffectEmit && e.Event != nil:
			events = append(events, e.ID)
		case e.Kind == turn.EffectEndCalls:
			for id := range e.EndEvents() {
				events = append(events, id)
			}
		}
	}
	var stored map[string]bool
	mark := func(id string) {
		if stored == nil {
			stored = map[string]bool{}
		}
		stored[id] = true
	}
	for _, e := range appends[:appendedPrefix(hist, appends)] {
		mark(e.ID)
	}
	if se, ok := g.host.ports.Events.(StoredEvents); ok && len(events) > 0 {
		got, err := se.StoredEvents(ctx, g.sid, events, rec.UpdatedAtMs)
		if err != nil {
			return nil, err
		}
		for _, id := range got {
			if slices.Contains(events, id) {
				mark(id)
			}
		}
	}
	return stored, nil
}

// appendedPrefix returns how many of appends, from the first on, hist
// ends with. A session's appends are stored in order, each once the one
// before it is, so what a dead activation stored is a prefix of them; the
// machine timestamps every message, so a transcript that ends with the
// same messages ends with these.
func appendedPrefix(hist []agent.Message, appends []turn.Effect) int {
	for k := len(appends); k > 0; k-- {
		n := 0
		for _, e := range appends[:k] {
			n += len(e.Messages)
		}
		if n > len(hist) {
			continue
		}
		tail, ok := hist[len(hist)-n:], true
		for _, e := range appends[:k] {
			for _, m := range e.Messages {
				if !sameMessage(tail[0], m) {
					ok = false
					break
				}
				tail = tail[1:]
			}
			if !ok {
				break
			}
		}
		if ok {
			return k
		}
	}
	return 0
}

// sameMessage compares two messages as the wire carries them.
func sameMessage(a, b agent.Message) bool {
	ja, err := json.Marshal(a)
	if err != nil {
		return false
	}
	jb, err := json.Marshal(b)
	return err == nil && bytes.Equal(ja, jb)
}
