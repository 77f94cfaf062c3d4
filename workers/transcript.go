package workers

import (
	"errors"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine/wire"
)

// TranscriptError maps an error of [agent.Transcripts.Resolve] onto the
// wire catalog, as every provider worker answers it: a transcript not
// kept here is conflict (the caller sends the whole transcript again), a
// malformed reference is invalid_payload.
func TranscriptError(err error) error {
	if errors.Is(err, agent.ErrTranscriptNotKept) {
		return wire.Wrap(wire.CodeConflict, err, "")
	}
	return wire.Wrap(wire.CodeInvalidPayload, err, "")
}
