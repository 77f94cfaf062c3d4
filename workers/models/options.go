package models

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/iii-on-nats/iii/agent"
	"github.com/iii-on-nats/iii/engine"
)

// Defaults and bounds of the options.
const (
	// DefaultReconcileTimeout bounds the provider::<name>::models call of one
	// models::reconcile.
	DefaultReconcileTimeout = 30 * time.Second
	// MaxReconcileTimeout bounds [WithReconcileTimeout].
	MaxReconcileTimeout = 10 * time.Minute
	// DefaultMissingRetention is how long a reconciled model the provider
	// no longer lists stays in the bucket ([WithMissingRetention]).
	DefaultMissingRetention = 30 * 24 * time.Hour
)

// Option configures a [Store] (and the [Worker] that opens one).
type Option func(*options) error

type options struct {
	base             []Entry // nil: the embedded catalog
	overrides        [][]byte
	logger           *slog.Logger // nil: the engine's logger
	reconcileTimeout time.Duration
	missingRetention time.Duration
	now              func() time.Time // the clock of missing_since
	// bucketCheck is how often the store asks whether the models bucket
	// was deleted or created again (engine.FollowBucket); 0: the engine's
	// default. Tests shorten it.
	bucketCheck time.Duration
}

func buildOptions(opts []Option) (options, error) {
	o := options{reconcileTimeout: DefaultReconcileTimeout, missingRetention: DefaultMissingRetention, now: time.Now}
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

// catalog is the base catalog with every override file applied, in order.
func (o options) catalog() ([]Entry, error) {
	entries := o.base
	if entries == nil {
		entries = embedded
	}
	for _, data := range o.overrides {
		var err error
		if entries, err = ApplyOverrides(entries, data); err != nil {
			return nil, err
		}
	}
	return cloneEntries(entries), nil
}

// WithCatalog replaces the embedded catalog with models (no aliases), for
// tests and embedders: a budget test prices the scripted model through it.
// An empty list is an empty catalog. The models are checked like a catalog
// file's; an error wraps engine.ErrInvalidOption and [ErrInvalidCatalog].
func WithCatalog(models []agent.Model) Option {
	entries := make([]Entry, len(models))
	for i, m := range models {
		entries[i] = Entry{Model: m}
	}
	return func(o *options) error {
		if err := ValidateCatalog(entries); err != nil {
			return fmt.Errorf("%w: %w", engine.ErrInvalidOption, err)
		}
		o.base = cloneEntries(entries)
		return nil
	}
}

// WithCatalogFile applies the override file at path (the format of
// catalog.json) on top of the base catalog: its entries correct or add
// models ([ApplyOverrides]). The file is read when the option is applied,
// so a missing or bad file fails at once; the error wraps
// engine.ErrInvalidOption. Several files apply in order.
func WithCatalogFile(path string) Option {
	return func(o *options) error {
		data, err := readLimited(path)
		if err != nil {
			return fmt.Errorf("%w: models catalog file: %w", engine.ErrInvalidOption, err)
		}
		base := o.base
		if base == nil {
			base = embedded
		}
		// Check now against the catalog as it stands, so the error names
		// the file; the final catalog is rebuilt at Open.
		if _, err := ApplyOverrides(base, data); err != nil {
			return fmt.Errorf("%w: models catalog file %s: %w", engine.ErrInvalidOption, path, err)
		}
		o.overrides = append(o.overrides, data)
		return nil
	}
}

// WithLogger sets the logger (default: the engine's, with worker=models).
// Records of the bucket that do not decode and provider models that are
// skipped are logged at Warn; the bucket watch's reopenings go to the
// engine's logger (engine.FollowBucket).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", engine.ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// WithReconcileTimeout bounds the provider::<name>::models call of
// models::reconcile (default [DefaultReconcileTimeout]; at most
// [MaxReconcileTimeout]). A provider that does not answer in time makes
// the reconcile unavailable.
func WithReconcileTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 || d > MaxReconcileTimeout {
			return fmt.Errorf("%w: reconcile timeout %v must be in (0, %v]", engine.ErrInvalidOption, d, MaxReconcileTimeout)
		}
		o.reconcileTimeout = d
		return nil
	}
}

// WithMissingRetention sets how long a reconciled model (one the catalog
// lacks) that the provider stopped listing keeps its record (default
// [DefaultMissingRetention]): models::reconcile marks it unavailable and
// stamps missing_since, and the first run after the retention deletes
// the record, so the bucket and models::list do not keep every model a
// provider ever listed. Marks of catalog models are kept: the catalog
// bounds them.
func WithMissingRetention(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: missing retention %v must be positive", engine.ErrInvalidOption, d)
		}
		o.missingRetention = d
		return nil
	}
}

// readLimited reads at most MaxCatalogFileBytes+1 bytes of path, so an
// oversized file is refused without being read whole.
func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxCatalogFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxCatalogFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, MaxCatalogFileBytes)
	}
	return data, nil
}
