package region

// Exported for tests.
var (
	SelectOrigin = selectOrigin
	MirrorConfig = mirrorConfig
	FinalConfig  = finalConfig
	CopyConfig   = copyConfig
)

// CopyOf is survey.copyOf over a survey of names.
func CopyOf(names []string, name, region string) (string, bool) {
	s := survey{names: names, probes: map[string]probe{}}
	for _, n := range names {
		s.probes[n] = probe{}
	}
	return s.copyOf(name, region)
}

// WithAfterOriginDeleted runs f after a takeover deleted a lost origin.
func WithAfterOriginDeleted(f func(stream string)) Option {
	return func(o *options) error { o.afterDelete = f; return nil }
}
