package directory

import (
	"fmt"
	"strings"

	"github.com/iii-on-nats/iii/subjects"
)

// LinkScheme prefixes a skill link: "iii://sandbox/fs::read" links the
// skill "sandbox/fs::read".
const LinkScheme = "iii://"

// OverviewName is the name of a worker's overview skill
// ("<worker>/overview"): the page that introduces the worker as a whole.
const OverviewName = "overview"

// ID names a skill: the worker that owns it and the skill's name within
// the worker, which is a function id ("fs::read") or a page name such as
// [OverviewName]. Its text form is "<worker>/<name>".
type ID struct {
	Worker string
	Name   string
}

// ParseID reads a skill id, either plain ("sandbox/fs::read") or as a link
// ("iii://sandbox/fs::read"). The worker is a worker name (letters, digits,
// '-' and '_'); the name, everything after the first '/', is a well-formed
// function id (see subjects.ValidateFunctionID). Errors wrap [ErrInvalidID].
func ParseID(s string) (ID, error) {
	rest := strings.TrimPrefix(s, LinkScheme)
	worker, name, ok := strings.Cut(rest, "/")
	if !ok {
		return ID{}, fmt.Errorf("%w: %q is not <worker>/<function> or %s<worker>/<function>", ErrInvalidID, s, LinkScheme)
	}
	if err := subjects.ValidateID("worker", worker); err != nil {
		return ID{}, fmt.Errorf("%w: %q: %w", ErrInvalidID, s, err)
	}
	if err := subjects.ValidateFunctionID(name); err != nil {
		return ID{}, fmt.Errorf("%w: %q: %w", ErrInvalidID, s, err)
	}
	return ID{Worker: worker, Name: name}, nil
}

// String is the plain id, "<worker>/<name>".
func (id ID) String() string { return id.Worker + "/" + id.Name }

// Link is the id as a link, "iii://<worker>/<name>".
func (id ID) Link() string { return LinkScheme + id.Worker + "/" + id.Name }
