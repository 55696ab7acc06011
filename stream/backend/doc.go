// Package backend builds runtimes: it discovers what the host can run
// (Jupyter kernelspecs with ipykernel, native Python, Node.js, a remote
// Jupyter server), chooses the backend of each call, holds the prewarm
// pools and the remote server's probe, and gives package stream the
// stream.Backend values whose Start functions launch kernels (package
// kernel), remote kernels (package kernel/remote) and native REPLs
// (package replbridge).
//
// It is the one place that knows those three packages: the gateway asks
// for a backend by what a call wants (Want) and never builds a runtime
// itself.
package backend
