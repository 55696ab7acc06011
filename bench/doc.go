// Package bench holds aiod's Go benchmarks: the REST path against its floor
// (ipykernel over zmq4), one-shot calls cold and prewarmed, and kernels on a
// remote Jupyter server, each against the real aiod binary. The comparison
// runner is package compare; the load generator, package load.
package bench
