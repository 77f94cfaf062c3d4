// Package e2e holds end-to-end tests that run several worker modules
// together on one embedded node, the way `iii up` composes them: the
// orchestrator with the directory, the sandbox and its tools, the approval
// gate and the scripted model. Workers never import each other; only these
// tests put them side by side. The package has no code of its own.
package e2e
