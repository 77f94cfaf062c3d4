// Package workers is the registry of harness workers and the written
// contract of a worker's lifecycle.
//
// A worker is a module: a package that registers a [Module] under a unique
// name in its init function, and is collected by one blank import
// (workers/std imports the default stack; cmd/iii imports only
// workers/std). Workers never import each other: they meet on the bus
// through function ids.
//
// # Lifecycle
//
// For every module a node runs, in order:
//
//  1. New: the module's constructor returns a fresh [Worker].
//  2. Provision (optional, [Provisioner]): read configuration from the [Env]
//     (home directory, logger, settings), open files, build clients. No bus
//     traffic yet.
//  3. Validate (optional, [Validator]): check the provisioned configuration;
//     an error stops the node before anything is registered.
//  4. Start: register functions, triggers and consumers on the engine. It
//     returns once the worker serves; long-running loops belong to handles
//     the worker keeps for Close.
//  5. Close (optional, [Closer]): stop loops and release resources, in
//     reverse start order, bounded by ctx. The engine closes the worker's
//     NATS services afterwards.
//
// A module is checked at compile time against the interfaces it means to
// implement:
//
//	var (
//		_ workers.Provisioner = (*Gate)(nil)
//		_ workers.Closer      = (*Gate)(nil)
//	)
//
// The global registry ([Register], [Modules]) serves the binary; tests and
// embedders build an isolated [Registry] with [NewRegistry].
package workers
