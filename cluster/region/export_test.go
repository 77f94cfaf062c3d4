package region

// Exported for tests.
var (
	SelectOrigin = selectOrigin
	MirrorConfig = mirrorConfig
	FinalConfig  = finalConfig
	CopyConfig   = copyConfig
)
