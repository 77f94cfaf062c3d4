package directory

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/iii-on-nats/iii/engine"
)

// Defaults and bounds of the options.
const (
	// DefaultPollInterval is how often the skills folder is checked for
	// changed files.
	DefaultPollInterval = 2 * time.Second
	// MinPollInterval and MaxPollInterval bound [WithPollInterval].
	MinPollInterval = time.Millisecond
	MaxPollInterval = time.Hour
	// DefaultFolderName is the skills folder under the node's home when
	// the "dir" setting is absent.
	DefaultFolderName = "skills"
)

// Option configures a [Directory] (and the [Worker] that opens one).
type Option func(*options) error

type options struct {
	dir    string
	poll   time.Duration
	logger *slog.Logger // nil: the engine's
	// bucketCheck is how often the directory asks whether the skills
	// bucket was deleted or created again (engine.FollowBucket); 0: the
	// engine's default. Tests shorten it.
	bucketCheck time.Duration
}

func buildOptions(opts []Option) (options, error) {
	o := options{poll: DefaultPollInterval}
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

// WithDir sets the skills folder: "<dir>/<worker>/<name>.md" is the skill
// "<worker>/<name>" and overrides a published skill of the same id. ""
// (the default) reads no folder; a folder that does not exist (yet) holds
// no skills.
func WithDir(dir string) Option {
	return func(o *options) error {
		o.dir = dir
		return nil
	}
}

// WithPollInterval sets how often the skills folder is checked for
// changes (default [DefaultPollInterval]).
func WithPollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < MinPollInterval || d > MaxPollInterval {
			return fmt.Errorf("%w: directory poll interval %v must be %v..%v", engine.ErrInvalidOption, d, MinPollInterval, MaxPollInterval)
		}
		o.poll = d
		return nil
	}
}

// WithLogger sets the logger (default: the engine's, with
// worker=directory). Skills that are ignored or partly ignored (a bad key,
// a bad file name, a malformed frontmatter) are logged at Warn, once per
// version; the bucket watch's reopenings go to the engine's logger
// (engine.FollowBucket).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", engine.ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}
