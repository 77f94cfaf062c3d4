package fstool

import (
	"fmt"
	"strings"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Defaults of the options.
const (
	// DefaultReadLimit is the number of lines fs::read answers when the
	// request sets no limit.
	DefaultReadLimit = 2000
	// DefaultMaxLineBytes bounds one line of an fs::read answer; a longer
	// line is cut (at a rune boundary) and marked with [LineCutMarker].
	DefaultMaxLineBytes = 2000
	// DefaultMaxAnswerBytes bounds the text of one answer: the content of
	// fs::read, the paths of fs::glob, the lines of fs::grep, in raw
	// bytes. The encoded answer is also held to the max payload
	// ([WithMaxPayload]): in JSON a control character takes six bytes.
	DefaultMaxAnswerBytes = 256 << 10
	// DefaultMaxWriteBytes bounds the content of fs::write and the result
	// of fs::edit.
	DefaultMaxWriteBytes = 10 << 20
	// DefaultMaxEntries bounds the entries of one fs::ls answer and the
	// matches of one fs::glob answer.
	DefaultMaxEntries = 1000
	// DefaultGrepResults is the max_results of an fs::grep request that
	// sets none.
	DefaultGrepResults = 100
	// DefaultMaxGrepResults bounds max_results.
	DefaultMaxGrepResults = 1000
	// DefaultMaxGrepFileBytes is the size above which fs::grep skips a
	// file.
	DefaultMaxGrepFileBytes = 4 << 20
	// DefaultMaxWalk bounds the directory entries one fs::ls, fs::glob or
	// fs::grep looks at, so a huge tree answers (truncated) instead of
	// running out the caller's time.
	DefaultMaxWalk = 200_000
	// DefaultGrepLineBytes bounds the text of one fs::grep match.
	DefaultGrepLineBytes = 500
	// DefaultMaxPayload is the max payload answers fit without
	// [WithMaxPayload]: the NATS server's default.
	DefaultMaxPayload = 1 << 20
)

// DefaultSkipDirs are the directory names fs::glob and fs::grep do not
// descend into while walking ([WithSkipDirs]).
var DefaultSkipDirs = []string{".git"}

// Option configures [Functions].
type Option func(*options) error

type options struct {
	maxLineBytes     int
	maxAnswerBytes   int
	maxWriteBytes    int
	maxEntries       int
	maxGrepResults   int
	maxGrepFileBytes int64
	maxWalk          int
	skipDirs         map[string]bool
	timeout          time.Duration
	quota            Quota
	owner            owner // of new files and directories, when root
	maxPayload       MaxPayloader
}

func buildOptions(opts []Option) (options, error) {
	o := options{
		maxLineBytes:     DefaultMaxLineBytes,
		maxAnswerBytes:   DefaultMaxAnswerBytes,
		maxWriteBytes:    DefaultMaxWriteBytes,
		maxEntries:       DefaultMaxEntries,
		maxGrepResults:   DefaultMaxGrepResults,
		maxGrepFileBytes: DefaultMaxGrepFileBytes,
		maxWalk:          DefaultMaxWalk,
		skipDirs:         map[string]bool{},
		owner:            noOwner,
		maxPayload:       fixedPayload(DefaultMaxPayload),
	}
	for _, d := range DefaultSkipDirs {
		o.skipDirs[d] = true
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	return o, nil
}

func positive(what string, n int) error {
	if n <= 0 {
		return fmt.Errorf("%w: fstool: %s %d must be positive", engine.ErrInvalidOption, what, n)
	}
	return nil
}

// WithMaxLineBytes bounds one line of an fs::read answer (default
// [DefaultMaxLineBytes]).
func WithMaxLineBytes(n int) Option {
	return func(o *options) error {
		if err := positive("max line bytes", n); err != nil {
			return err
		}
		o.maxLineBytes = n
		return nil
	}
}

// WithMaxAnswerBytes bounds the text of one fs::read, fs::glob or fs::grep
// answer in raw bytes (default [DefaultMaxAnswerBytes]). An answer that
// reaches it is cut and says truncated. Whatever the bound, an answer is
// also cut to the max payload in the caller's codec ([WithMaxPayload]).
func WithMaxAnswerBytes(n int) Option {
	return func(o *options) error {
		if err := positive("max answer bytes", n); err != nil {
			return err
		}
		o.maxAnswerBytes = n
		return nil
	}
}

// WithMaxWriteBytes bounds what fs::write and fs::edit write (default
// [DefaultMaxWriteBytes]); a larger content is refused with
// invalid_payload.
func WithMaxWriteBytes(n int) Option {
	return func(o *options) error {
		if err := positive("max write bytes", n); err != nil {
			return err
		}
		o.maxWriteBytes = n
		return nil
	}
}

// WithMaxEntries bounds the entries of fs::ls and the matches of fs::glob
// (default [DefaultMaxEntries]).
func WithMaxEntries(n int) Option {
	return func(o *options) error {
		if err := positive("max entries", n); err != nil {
			return err
		}
		o.maxEntries = n
		return nil
	}
}

// WithMaxGrepResults bounds the max_results of fs::grep (default
// [DefaultMaxGrepResults]); a larger request is lowered to it.
func WithMaxGrepResults(n int) Option {
	return func(o *options) error {
		if err := positive("max grep results", n); err != nil {
			return err
		}
		o.maxGrepResults = n
		return nil
	}
}

// WithMaxGrepFileBytes sets the size above which fs::grep skips a file
// (default [DefaultMaxGrepFileBytes]).
func WithMaxGrepFileBytes(n int64) Option {
	return func(o *options) error {
		if n <= 0 {
			return fmt.Errorf("%w: fstool: max grep file bytes %d must be positive", engine.ErrInvalidOption, n)
		}
		o.maxGrepFileBytes = n
		return nil
	}
}

// WithMaxWalk bounds the directory entries one fs::ls, fs::glob or fs::grep
// looks at (default [DefaultMaxWalk]); past it the answer says truncated.
func WithMaxWalk(n int) Option {
	return func(o *options) error {
		if err := positive("max walk", n); err != nil {
			return err
		}
		o.maxWalk = n
		return nil
	}
}

// WithSkipDirs replaces [DefaultSkipDirs]: directory names (not paths)
// fs::glob and fs::grep do not descend into while walking. A walk that
// starts inside one still works. No names means skip nothing.
func WithSkipDirs(names ...string) Option {
	return func(o *options) error {
		m := make(map[string]bool, len(names))
		for _, n := range names {
			if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\x00") {
				return fmt.Errorf("%w: fstool: skip dir %q is not a directory name", engine.ErrInvalidOption, n)
			}
			m[n] = true
		}
		o.skipDirs = m
		return nil
	}
}

// WithTimeout sets the [engine.Function] Timeout of every function (default
// zero: the engine's default). A caller's shorter budget still wins.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: fstool: timeout %v must be positive", engine.ErrInvalidOption, d)
		}
		o.timeout = d
		return nil
	}
}

// WithQuota makes fs::write and fs::edit ask q before every write that
// grows the disk space the root takes (default: no quota). The sandbox
// worker passes one that holds each workdir to its disk_mb.
func WithQuota(q Quota) Option {
	return func(o *options) error {
		if q == nil {
			return fmt.Errorf("%w: fstool: nil quota", engine.ErrInvalidOption)
		}
		o.quota = q
		return nil
	}
}

// WithOwner names the host uid and gid that files and directories
// fs::write creates should belong to when the tools run as root (default
// -1, -1: root's own; -1 leaves one id as it is). The sandbox worker
// passes the sandbox's user on the host, which its owner fix before each
// exec gives every file anyway, so a process of the sandbox may write
// them at once. A replaced file keeps its owner without this option. A
// process that is not root makes files of its own and ignores it.
func WithOwner(uid, gid int) Option {
	return func(o *options) error {
		if uid < -1 || gid < -1 {
			return fmt.Errorf("%w: fstool: owner %d:%d (ids are -1 or more)", engine.ErrInvalidOption, uid, gid)
		}
		o.owner = owner{uid, gid}
		return nil
	}
}

// MaxPayloader reports the bus's max payload in bytes, read at every call
// (a reconnect may reach a server with another); *nats.Conn is one.
type MaxPayloader interface {
	MaxPayload() int64
}

type fixedPayload int64

func (p fixedPayload) MaxPayload() int64 { return int64(p) }

// WithMaxPayload gives the max payload every answer must fit in the
// caller's codec (default [DefaultMaxPayload]); the sandbox worker passes
// its engine's connection. An fs::read, fs::ls, fs::glob or fs::grep
// answer that would not fit is cut further (whole lines, entries,
// matches) and says truncated, rather than fail as internal.
func WithMaxPayload(src MaxPayloader) Option {
	return func(o *options) error {
		if src == nil {
			return fmt.Errorf("%w: fstool: nil max payload source", engine.ErrInvalidOption)
		}
		o.maxPayload = src
		return nil
	}
}
