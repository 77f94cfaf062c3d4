package directory

import (
	"errors"

	"github.com/iii-on-nats/iii/engine/wire"
	"github.com/iii-on-nats/iii/workers"
)

// Sentinel errors of the Go API. Errors that cross the wire are *wire.Error
// values from the catalog: invalid_payload for a bad request or id,
// not_found for an unknown skill.
var (
	// ErrStarted is returned by [Worker.Start] when called twice.
	ErrStarted = workers.ErrStarted
	// ErrInvalidID is wrapped by every [ParseID] error.
	ErrInvalidID = errors.New("directory: invalid skill id")
	// ErrMalformedFrontmatter is wrapped by the error [ParseDocument]
	// returns for a document whose frontmatter does not parse; the document
	// it returns alongside is still usable (its body is the whole text).
	ErrMalformedFrontmatter = errors.New("directory: malformed frontmatter")
)

// invalidWrap is the invalid_payload error of a request that fails
// validation, carrying cause as its message.
func invalidWrap(cause error) *wire.Error {
	return wire.Wrap(wire.CodeInvalidPayload, cause, "")
}
