package workers

import (
	"errors"
	"strings"

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

// StreamRequestSchema is the JSON Schema of a provider::<name>::stream
// request: a channel id, the provider's request properties props (a JSON
// object's members; their messages may be empty here, since a
// continuation carries them in transcript.more) and the transcript
// reference ([agent.TranscriptRef]); message is the schema of one message.
func StreamRequestSchema(props, message string) string {
	props = strings.Replace(props, `"minItems":1,`, ``, 1)
	return `{"type":"object","required":["channel","model"],"properties":{` +
		`"channel":{"type":"string","pattern":"^[A-Za-z0-9_-]{1,128}$"},` + props + `,` +
		`"transcript":{"type":"object","required":["id"],"description":"keep this transcript; with base, messages are empty and more continues it","properties":{` +
		`"id":{"type":"string","pattern":"^[A-Za-z0-9_-]{1,128}$"},"base":{"type":"integer","minimum":0},"more":{"type":"array","items":` + message + `}}}}}`
}

// TranscriptKeptProperty is the transcript_kept member of a stream
// answer's JSON Schema properties.
const TranscriptKeptProperty = `"transcript_kept":{"type":"string","description":"the transcript id the worker keeps for a continuation"}`
