package fstool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"

	"github.com/iii-on-nats/iii/engine"
	"github.com/iii-on-nats/iii/engine/wire"
)

// ErrNilResolver is returned by [Functions] without a [Resolver]; it wraps
// engine.ErrInvalidOption.
var ErrNilResolver = fmt.Errorf("%w: fstool: nil resolver", engine.ErrInvalidOption)

func invalid(format string, args ...any) *wire.Error {
	return wire.Errorf(wire.CodeInvalidPayload, format, args...)
}

func forbidden(format string, args ...any) *wire.Error {
	return wire.Errorf(wire.CodeForbidden, format, args...)
}

// ctxErr is the wire error of a call whose context ended, or nil.
func ctxErr(ctx context.Context) *wire.Error {
	switch err := ctx.Err(); {
	case errors.Is(err, context.Canceled):
		return wire.Wrap(wire.CodeCanceled, err, "")
	case errors.Is(err, context.DeadlineExceeded):
		return wire.Wrap(wire.CodeTimeout, err, "")
	}
	return nil
}

// fsErr maps an error of an operation on the root-relative path rel onto
// the catalog. The messages name rel, never the root.
func fsErr(ctx context.Context, err error, op, rel string) *wire.Error {
	var we *wire.Error
	switch {
	case errors.As(err, &we):
		return we
	case ctxErr(ctx) != nil:
		return ctxErr(ctx)
	case errors.Is(err, fs.ErrNotExist):
		return wire.Errorf(wire.CodeNotFound, "%s %s: no such file or directory", op, rel)
	case isEscape(err), errors.Is(err, syscall.ELOOP):
		return forbidden("%s %s: the path leaves the root or goes through a symlink", op, rel)
	case errors.Is(err, fs.ErrPermission):
		return forbidden("%s %s: permission denied", op, rel)
	case errors.Is(err, syscall.ENOTDIR):
		return invalid("%s %s: a component of the path is not a directory", op, rel)
	case errors.Is(err, syscall.EISDIR):
		return invalid("%s %s: is a directory", op, rel)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return invalid("%s %s: name too long", op, rel)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return wire.Wrap(wire.CodeUnavailable, err, "%s %s", op, rel)
	case errors.Is(err, syscall.EROFS):
		return forbidden("%s %s: read-only file system", op, rel)
	}
	return wire.Errorf(wire.CodeInternal, "%s %s: %s", op, rel, stripPath(err))
}

// isEscape reports os.Root's refusal of a name that leaves the root; the
// os package does not export the error.
func isEscape(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// stripPath is the message of err without the *fs.PathError's path (which
// for an os.Root operation may name the root).
func stripPath(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}
