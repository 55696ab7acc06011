package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aiod/aiod/gateway"
	"github.com/aiod/aiod/gateway/api"
	"github.com/aiod/aiod/stream"
	"github.com/aiod/aiod/stream/backend"
	"github.com/aiod/aiod/stream/backend/isolate"
	"github.com/aiod/aiod/stream/backend/sandbox"
)

var (
	errHelp    = errors.New("help requested")
	errVersion = errors.New("version requested")
)

// options are the daemon's settings. Each comes from its flag, else its
// AIO_* variable, else the default.
type options struct {
	addr               string
	codeBackend        string
	kernelName         string
	defaultTimeout     time.Duration
	maxTimeout         time.Duration
	kernelIdle         time.Duration
	tenantIdle         time.Duration
	nativeIdle         time.Duration
	kernelStartTimeout time.Duration
	nativeStartTimeout time.Duration
	outputBudget       int
	maxBody            int
	heldTenant         int
	heldTotal          int
	workdir            string
	shutdownTimeout    time.Duration
	logLevel           slog.Level
	logFormat          string
	token              string // AIO_TOKEN, or read from tokenFile
	tokenFile          string
	allowedOrigins     string
	allowedHosts       string
	jwtPublicKey       string
	jwtPublicKeyFile   string
	ticketTTL          time.Duration
	maxTicketsPerCall  int
	maxConnsPerIP      int
	memoryLimit        int
	kernelPrewarm      int // -1: auto
	codePrewarm        int
	kernelWarmup       bool
	kernelStart        string
	kernelTransport    string
	jupyterEndpoint    string
	jupyterToken       string // AIO_JUPYTER_TOKEN, or read from jupyterTokenFile
	jupyterTokenFile   string
	jupyterKernel      string
	jupyterStart       time.Duration
	jupyterProbe       time.Duration
	wsQueueBytes       int
	writeTimeout       time.Duration
	execRetention      time.Duration
	execRetentionBytes int
	accessLog          bool
	metricsPublic      bool
	runtimeMemory      int64   // bytes per runtime; 0 none
	runtimesMemory     int64   // bytes for all runtimes together; 0 none
	runtimePids        int64   // processes per runtime; 0 none
	runtimeCPU         float64 // cores per runtime; 0 none
	runtimesCPUWeight  float64 // runtimes together against aiod, cgroup v1; 0 default layout
	runtimesPids       int64   // processes and threads of all runtimes together; 0 none
	tenantMemory       int64   // bytes for one tenant's runtimes together; 0 none
	tenantPids         int64   // processes and threads of one tenant's runtimes together; 0 none
	runtimePtys        int     // pseudo-terminals a tenant runtime may open (a devpts of its own); 0 the host's
	runtimeUser        string
	runtimeEnvAllow    string
	maxSessions        int // -1: auto
	maxSessionsPerKey  int
	maxStarts          int // -1: auto
	startQueue         int
	startQueueWait     time.Duration
	isolation          string
	stateDir           string
	tenantUIDs         [2]uint32
	runtimeNetwork     string
	egressAllow        string
	volumes            []string // HOST[:PATH][:ro|rw], from every --volume and AIO_VOLUMES
	pprofAddr          string   // "": off
	snapMaxBytes       int
	snapTotalBytes     int
	snapTenantBytes    int
	snapRetention      time.Duration
	clusterNATS        string // "": a single daemon
	clusterAdvertise   string // "": --addr
	clusterSecretFile  string
	clusterSecret      []byte // read from clusterSecretFile
	clusterLease       time.Duration
	clusterCheckpoint  time.Duration
	clusterFilesMax    int64
}

// setting is one flag with its variable, for parsing and for --help.
type setting struct {
	flag, env, def, help string
	set                  setter
}

// setter parses one setting's value; kind names its type in --help.
type setter struct {
	kind string
	fn   func(string) error
}

// kinds names, in --help, what the string settings hold.
var kinds = map[string]string{
	"addr": "host:port", "code-backend": "auto|native|kernel", "kernel-name": "kernelspec",
	"workdir": "folder", "jupyter-endpoint": "url", "jupyter-token": "token", "jupyter-kernel": "kernelspec",
	"token": "token", "jwt-public-key": "pem", "allowed-hosts": "list", "allowed-origins": "list",
	"token-file": "file", "jupyter-token-file": "file", "jwt-public-key-file": "file",
	"log-format": "text|json", "runtime-user": "name|uid[:gid]", "runtime-env-allow": "list",
	"isolation": "auto|tenant|none", "state-dir": "folder", "runtime-network": "none|allow|host", "egress-allow": "list",
	"volume": "host[:path][:ro|rw]", "cluster-nats": "urls", "cluster-advertise": "host:port", "cluster-secret-file": "file",
}

// defaultEnvAllow is --runtime-env-allow's default (isolate.DefaultEnvAllow).
const defaultEnvAllow = "PATH,HOME,LANG,LC_*,TZ,TMPDIR,TERM,USER,LOGNAME,PYTHON*,NODE_*,JUPYTER_*,MPLBACKEND,KERNEL_*"

// usageError is a setting that cannot work: the daemon exits 2 with it.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func (o *options) settings() []setting {
	return []setting{
		{"addr", "AIO_ADDR", "127.0.0.1:18091", "HOST:PORT to listen on", strSetter(&o.addr)},
		{"code-backend", "AIO_CODE_BACKEND", "auto", "Python backend on the code routes: auto, native or kernel", strSetter(&o.codeBackend)},
		{"kernel-name", "AIO_KERNEL_NAME", "", "kernelspec for Python kernels (default: python3, else the first with ipykernel)", strSetter(&o.kernelName)},
		{"default-timeout", "AIO_DEFAULT_TIMEOUT", "30", "execution timeout in seconds when a call gives none", secSetter(&o.defaultTimeout)},
		{"max-timeout", "AIO_MAX_TIMEOUT", "900", "largest timeout a call may ask for, in seconds", secSetter(&o.maxTimeout)},
		{"kernel-idle", "AIO_KERNEL_IDLE", "300", "seconds an unused kernel session lives", secSetter(&o.kernelIdle)},
		{"native-idle", "AIO_NATIVE_IDLE", "1800", "seconds an unused native REPL session lives", secSetter(&o.nativeIdle)},
		{"kernel-start-timeout", "AIO_KERNEL_START_TIMEOUT", "60", "seconds a kernel may take to start", secSetter(&o.kernelStartTimeout)},
		{"native-start-timeout", "AIO_NATIVE_START_TIMEOUT", "10", "seconds a native REPL (Python, Node.js, bash) may take to say it is ready; both start bounds stretch up to three times while the runtime waits for a CPU", secSetter(&o.nativeStartTimeout)},
		{"output-budget", "AIO_OUTPUT_BUDGET", "8388608", "bytes of output kept per execution (head and tail kept past it), and so the size of its answer: stream text counts twice (outputs and stdout/stderr); its log, from which streams resume, keeps the last half of it", intSetter(&o.outputBudget)},
		{"max-body", "AIO_MAX_BODY", "67108864", "largest request body in bytes (413 past it)", intSetter(&o.maxBody)},
		{"held-code-tenant", "AIO_HELD_CODE_TENANT", "134217728", "bytes of code one tenant's calls may hold in memory while they wait in a session's queue or run; past it a call is refused 429 (one call alone always passes); 0 means no bound", intSetter(&o.heldTenant)},
		{"held-code-total", "AIO_HELD_CODE_TOTAL", "536870912", "bytes of code all calls together may hold in memory while they wait or run; past it a call is refused 429; 0 means no bound", intSetter(&o.heldTotal)},
		{"workdir", "AIO_WORKDIR", "", "working folder of kernels and REPLs. Without tenant isolation the host's folder (default: the daemon's); under tenant isolation each tenant's own folder, shown at this path and empty at first, not the host's files (default: its HOME, /home/user)", strSetter(&o.workdir)},
		{"shutdown-timeout", "AIO_SHUTDOWN_TIMEOUT", "20", "seconds to drain requests and stop runtimes on SIGINT/SIGTERM", secSetter(&o.shutdownTimeout)},
		{"kernel-prewarm", "AIO_KERNEL_PREWARM", "auto", "Python kernels kept started and ready for one-shot calls and new sessions (per tenant under --isolation tenant); auto is 2 with --kernel-start fork, fewer under a small --max-sessions or on a machine under 2 GiB, 0 with spawn (docs/kernels.md); 0 turns the pool off", autoCountSetter(&o.kernelPrewarm)},
		{"code-prewarm", "AIO_CODE_PREWARM", "0", "native REPL processes kept ready per language (javascript; python when the backend is native)", countSetter(&o.codePrewarm)},
		{"kernel-warmup", "AIO_KERNEL_WARMUP", "true", "import pandas and matplotlib in pooled kernels before handing them out, and in kernel templates before forking", boolSetter(&o.kernelWarmup)},
		{"kernel-start", "AIO_KERNEL_START", "fork", "how Python kernels start: fork (from a warm template process per kernelspec, where its argv is the standard ipykernel launcher) or spawn (a new process each)", strSetter(&o.kernelStart)},
		{"kernel-transport", "AIO_KERNEL_TRANSPORT", "auto", "sockets of local kernels: auto (ipc for ipykernel kernelspecs, tcp for others), ipc (Unix sockets in the kernel's 0700 folder) or tcp (loopback ports)", strSetter(&o.kernelTransport)},
		{"jupyter-endpoint", "AIO_JUPYTER_ENDPOINT", "", "http(s)://host:port[/base] of a Jupyter server (Jupyter Server, Kernel or Enterprise Gateway) to run Python kernels on while it answers", strSetter(&o.jupyterEndpoint)},
		{"jupyter-token", "AIO_JUPYTER_TOKEN", "", "token for that server, sent as Authorization: token T", strSetter(&o.jupyterToken)},
		{"jupyter-token-file", "AIO_JUPYTER_TOKEN_FILE", "", "file holding that token (a trailing newline is dropped); instead of AIO_JUPYTER_TOKEN", strSetter(&o.jupyterTokenFile)},
		{"jupyter-kernel", "AIO_JUPYTER_KERNEL", "", "kernelspec to start on that server (default: its default)", strSetter(&o.jupyterKernel)},
		{"jupyter-start-timeout", "AIO_JUPYTER_START_TIMEOUT", "120", "seconds a remote kernel may take to start (minutes on a cluster)", secSetter(&o.jupyterStart)},
		{"jupyter-probe-interval", "AIO_JUPYTER_PROBE_INTERVAL", "30", "seconds between reachability probes of that server", secSetter(&o.jupyterProbe)},
		{"execution-retention", "AIO_EXECUTION_RETENTION", "600", "seconds a finished execution's outputs and result are kept for GET /v2/code/executions/{id}, resume and retries", secSetter(&o.execRetention)},
		{"execution-retention-bytes", "AIO_EXECUTION_RETENTION_BYTES", "268435456", "bytes all finished executions may hold; the oldest are evicted first", intSetter(&o.execRetentionBytes)},
		{"snapshot-max-bytes", "AIO_SNAPSHOT_MAX_BYTES", "268435456", "bytes one session snapshot may hold (values past it are skipped)", intSetter(&o.snapMaxBytes)},
		{"snapshot-total-bytes", "AIO_SNAPSHOT_TOTAL_BYTES", "4294967296", "bytes all session snapshots in the state directory may hold; past it, the oldest of the tenant holding the most are deleted first", intSetter(&o.snapTotalBytes)},
		{"snapshot-tenant-bytes", "AIO_SNAPSHOT_TENANT_BYTES", "1073741824", "bytes one tenant's session snapshots may hold; past it, that tenant's oldest are deleted first (never another tenant's)", intSetter(&o.snapTenantBytes)},
		{"snapshot-retention", "AIO_SNAPSHOT_RETENTION", "604800", "seconds a session snapshot is kept (a saved session is forgotten after it)", secSetter(&o.snapRetention)},
		{"ws-queue-limit", "AIO_WS_QUEUE_LIMIT", "16777216", "bytes that may wait for one WebSocket; a socket that stops reading is closed with 1008 past it", intSetter(&o.wsQueueBytes)},
		{"write-timeout", "AIO_WRITE_TIMEOUT", "10", "seconds one write to a client (a WebSocket's batch of messages, a batch of an SSE or NDJSON stream or a watch) may block; a client that reads nothing for that long is cut", secSetter(&o.writeTimeout)},
		{"max-sessions", "AIO_MAX_SESSIONS", "auto", "live sessions of all kinds (named and one-shot, starting ones included, prewarm pools not) before new ones get 429; auto derives it from the machine's memory (docs/limits.md); 0 means no cap", limitSetter(&o.maxSessions, true)},
		{"max-sessions-per-key", "AIO_MAX_SESSIONS_PER_KEY", "0", "the same cap for one caller when credentials are required (the JWT sub, or the token); 0 means none", limitSetter(&o.maxSessionsPerKey, false)},
		{"max-concurrent-starts", "AIO_MAX_CONCURRENT_STARTS", "auto", "runtime starts running at once; others wait in line, first come first served; auto is one per core, at least 2", limitSetter(&o.maxStarts, true)},
		{"start-queue", "AIO_START_QUEUE", "512", "runtime starts that may wait for a start slot; past it a start is refused at once with 503 and Retry-After", limitSetter(&o.startQueue, false)},
		{"start-queue-timeout", "AIO_START_QUEUE_TIMEOUT", "60", "seconds a runtime start may wait for a start slot before the call gets 503 and Retry-After", secSetter(&o.startQueueWait)},
		{"token", "AIO_TOKEN", "", "API token required on every route but /healthz (Authorization: Bearer, or ?token=)", strSetter(&o.token)},
		{"token-file", "AIO_TOKEN_FILE", "", "file holding the API token (a trailing newline is dropped); instead of AIO_TOKEN", strSetter(&o.tokenFile)},
		{"jwt-public-key", "AIO_JWT_PUBLIC_KEY", "", "PEM public key, or its base64, verifying Authorization: Bearer JWTs (RS*, PS*, ES*, EdDSA; sub and exp required); also read from JWT_PUBLIC_KEY", strSetter(&o.jwtPublicKey)},
		{"jwt-public-key-file", "AIO_JWT_PUBLIC_KEY_FILE", "", "file holding that public key (PEM, or its base64); instead of --jwt-public-key", strSetter(&o.jwtPublicKeyFile)},
		{"ticket-ttl", "AIO_TICKET_TTL_SECONDS", "30", "seconds a single-use ticket from POST /tickets lives; also read from TICKET_TTL_SECONDS", secSetter(&o.ticketTTL)},
		{"max-tickets-per-caller", "AIO_MAX_TICKETS_PER_CALLER", "1000", "unused tickets one caller (the JWT sub, or the token) may hold; past it POST /tickets gets 429 and Retry-After", rangeSetter(&o.maxTicketsPerCall, 1, 10000)},
		{"max-conns-per-ip", "AIO_MAX_CONNS_PER_IP", "256", "connections at once from one client address (WebSockets included); past it a new one is answered 429 and closed; 0 means no limit", rangeSetter(&o.maxConnsPerIP, 0, 1_000_000)},
		{"allowed-hosts", "AIO_ALLOWED_HOSTS", "", "comma-separated Host names accepted besides loopback and the daemon's own addresses (*.example.com for subdomains); * turns the Host check off", strSetter(&o.allowedHosts)},
		{"allowed-origins", "AIO_ALLOWED_ORIGINS", "", "comma-separated origins allowed on state-changing requests, CORS and WebSockets besides the request's own; * allows any", strSetter(&o.allowedOrigins)},
		{"metrics-public", "AIO_METRICS_PUBLIC", "false", "serve /metrics without credentials (for a scraper that cannot send a token)", boolSetter(&o.metricsPublic)},
		{"memory-limit", "AIO_MEMORY_LIMIT", "67108864", "soft limit in bytes on the daemon's Go memory while it holds little; raised with what it holds (GOMEMLIMIT wins when set)", intSetter(&o.memoryLimit)},
		{"log-level", "AIO_LOG_LEVEL", "info", "debug, info, warn or error", levelSetter(&o.logLevel)},
		{"log-format", "AIO_LOG_FORMAT", "text", "text or json", strSetter(&o.logFormat)},
		{"runtime-memory-limit", "AIO_RUNTIME_MEMORY_LIMIT", "25%", "memory per local runtime (kernel, REPL, node process, with its children): bytes, with K, M, G or T (binary), or a percentage of the machine's memory; 0 for none", memSetter(&o.runtimeMemory)},
		{"runtimes-memory-total", "AIO_RUNTIMES_MEMORY_TOTAL", "85%", "memory of all local runtimes together (their cgroups' parent): bytes, with K, M, G or T, or a percentage of the machine's memory; 0 for none", memSetter(&o.runtimesMemory)},
		{"runtime-pids-limit", "AIO_RUNTIME_PIDS_LIMIT", "1024", "processes and threads per local runtime; 0 for none", pidsSetter(&o.runtimePids)},
		{"runtime-cpu-limit", "AIO_RUNTIME_CPU_LIMIT", "0", "CPU cores per local runtime, as a quota (1.5 is one and a half cores); 0 for none", cpuSetter(&o.runtimeCPU)},
		{"runtimes-pids-total", "AIO_RUNTIMES_PIDS_TOTAL", "50%", "processes and threads of all local runtimes together (their cgroups' parent): a number, or a percentage of the machine's pid_max; 0 for none", totalPidsSetter(&o.runtimesPids)},
		{"tenant-memory-limit", "AIO_TENANT_MEMORY_LIMIT", "50%", "memory of one tenant's runtimes together under --isolation tenant (a group of its own between theirs and the runtimes' parent): bytes, with K, M, G or T, or a percentage of the machine's memory; 0 for none", memSetter(&o.tenantMemory)},
		{"tenant-pids-limit", "AIO_TENANT_PIDS_LIMIT", "25%", "processes and threads of one tenant's runtimes together under --isolation tenant: a number, or a percentage of the machine's pid_max; 0 for none", totalPidsSetter(&o.tenantPids)},
		{"runtimes-cpu-weight", "AIO_RUNTIMES_CPU_WEIGHT", "0.0625", "when aiod and its runtimes both want more CPU than there is, all runtimes together get this many parts to aiod's one (cgroup v1: aiod moves into a cpu group of its own beside theirs); the default gives aiod 16 parts to their 1, since every tenant's call crosses aiod; 0 leaves aiod in its cgroup and the runtimes' parent at one task's weight", weightSetter(&o.runtimesCPUWeight)},
		{"runtime-user", "AIO_RUNTIME_USER", "", "run every local runtime as this user (a name, or uid[:gid]) when aiod runs as root", strSetter(&o.runtimeUser)},
		{"runtime-env-allow", "AIO_RUNTIME_ENV_ALLOW", defaultEnvAllow, "comma-separated variables of aiod's environment that runtimes get: names, or prefixes ending in * (AIO_* and JWT_PUBLIC_KEY never pass)", strSetter(&o.runtimeEnvAllow)},
		{"isolation", "AIO_ISOLATION", "auto", "tenant: every caller's runtimes (and file plane) in a sandbox of their own (namespaces, a read-only host, the tenant's folders, its own uid, seccomp); none: one shared host, as aiod's user or --runtime-user; auto: tenant where the machine allows it (root, namespaces), else none with the reason logged", strSetter(&o.isolation)},
		{"state-dir", "AIO_STATE_DIR", defaultStateDir(), "aiod's state directory, created 0700 and locked: tenants' folders and uids live there", strSetter(&o.stateDir)},
		{"tenant-idle", "AIO_TENANT_IDLE", "600", "seconds after which a tenant nobody has called and that runs nothing (no session's runtime, terminal, pool or file helper) is let go under tenant isolation: its network namespace, egress proxy and helper close, its folders, uid and saved sessions stay, and its next call makes its sandbox anew; 0 keeps every tenant for aiod's life", idleSetter(&o.tenantIdle)},
		{"tenant-uids", "AIO_TENANT_UIDS", "auto", "FIRST-LAST: the uids (and gids) tenants get under tenant isolation, one each, kept across restarts; nothing else on the machine may use them. auto: the state directory's own block of 1,000,000 from 2000000000 up, the first free one, recorded in STATE/tenant-uids and kept; a second daemon on its own --state-dir takes the next", uidRangeSetter(&o.tenantUIDs)},
		{"runtime-ptys", "AIO_RUNTIME_PTYS", "512", "pseudo-terminals a runtime may open under --isolation tenant, in a devpts of its own (the host's keeps its own share for root and aiod's terminals); 0 leaves runtimes on the host's devpts", rangeSetter(&o.runtimePtys, 0, 65536)},
		{"runtime-network", "AIO_RUNTIME_NETWORK", "none", "network of tenant runtimes under --isolation tenant: none (a network namespace per tenant with its own loopback only), allow (that, and an HTTP proxy in it letting through only --egress-allow) or host", strSetter(&o.runtimeNetwork)},
		{"volume", "AIO_VOLUMES", "", "HOST[:PATH][:ro|rw]: a host folder every tenant's runtimes (and the file plane) see at PATH (default: HOST), read-only unless rw; repeat the flag, or give several comma-separated. PATH is an existing host folder or a new one under /home. Needs tenant isolation", listAppender(&o.volumes)},
		{"egress-allow", "AIO_EGRESS_ALLOW", "", "with --runtime-network allow: comma-separated HOST:PORT destinations runtimes may reach through aiod's proxy (a name, *.name for its subdomains, or an address), e.g. pypi.org:443,files.pythonhosted.org:443", strSetter(&o.egressAllow)},
		{"pprof-addr", "AIO_PPROF_ADDR", "", "serve Go's profiles (net/http/pprof: CPU, heap, goroutines) on this loopback HOST:PORT, a listener of its own with no credentials; off when empty", loopbackSetter(&o.pprofAddr)},
		{"cluster-nats", "AIO_CLUSTER_NATS", "", "nats://HOST:PORT URLs, comma-separated, of a NATS JetStream system (nats-server -js, 2.9 or newer) that makes this daemon a replica of a cluster: each tenant has a home replica, and any replica answers any call by forwarding it there (docs/scale-out.md); empty: a single daemon", strSetter(&o.clusterNATS)},
		{"cluster-advertise", "AIO_CLUSTER_ADVERTISE", "", "HOST:PORT at which the other replicas reach this one (its id in the cluster); default: the address aiod listens on, which must then name a host (not 0.0.0.0)", strSetter(&o.clusterAdvertise)},
		{"cluster-secret-file", "AIO_CLUSTER_SECRET_FILE", "", "file holding the secret (16 bytes or more) that every replica shares: it signs the callers one replica forwards to another; required with --cluster-nats", strSetter(&o.clusterSecretFile)},
		{"cluster-lease", "AIO_CLUSTER_LEASE", "15", "seconds without a heartbeat after which a replica is taken for gone and its tenants are placed on others at their next call", secSetter(&o.clusterLease)},
		{"cluster-checkpoint", "AIO_CLUSTER_CHECKPOINT", "10", "seconds after a named session ran code before its home writes it to the cluster's object store: a home that dies without a stop loses at most the work since; 0 writes only at a stop", idleSetter(&o.clusterCheckpoint)},
		{"cluster-files-max", "AIO_CLUSTER_FILES_MAX", "64M", "bytes of a tenant's own files (HOME, /tmp, /var/tmp and the working folder, as a tar) that go with its checkpoints and handovers under --isolation tenant; a tenant with more keeps them on its home only (mount a shared volume); 0: files never move", sizeSetter(&o.clusterFilesMax)},
		{"access-log", "AIO_ACCESS_LOG", "true", "log one line per request at info: method, route pattern, status, duration, bytes (never bodies, queries or credentials)", boolSetter(&o.accessLog)},
	}
}

// loopbackSetter reads a HOST:PORT whose host is a loopback address (or
// localhost): what it serves needs no credentials, so only this machine
// may reach it.
func loopbackSetter(p *string) setter {
	return setter{"host:port", func(v string) error {
		host, port, err := net.SplitHostPort(v)
		if err != nil {
			return fmt.Errorf("want HOST:PORT, got %q", v)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("want a port number, got %q", port)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("%q is not a loopback address: the profiles are served without credentials, so give 127.0.0.1:PORT or [::1]:PORT", host)
		}
		*p = v
		return nil
	}}
}

func strSetter(p *string) setter {
	return setter{"string", func(v string) error { *p = v; return nil }}
}

func secSetter(p *time.Duration) setter {
	return setter{"seconds", func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			return fmt.Errorf("want a positive number of seconds, got %q", v)
		}
		*p = time.Duration(f * float64(time.Second))
		return nil
	}}
}

// idleSetter reads seconds where 0 means never (-1 in the Config).
func idleSetter(p *time.Duration) setter {
	return setter{"seconds", func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return fmt.Errorf("want 0 (never) or a positive number of seconds, got %q", v)
		}
		*p = time.Duration(f * float64(time.Second))
		if f == 0 {
			*p = -1
		}
		return nil
	}}
}

// intSetter reads a byte count (every such setting is one).
func intSetter(p *int) setter {
	return setter{"bytes", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive integer, got %q", v)
		}
		*p = n
		return nil
	}}
}

// limitSetter reads a count of 0 or more, or "auto" (stored as -1) when
// auto is allowed.
func limitSetter(p *int, auto bool) setter {
	kind := "count"
	if auto {
		kind = "auto|count"
	}
	return setter{kind, func(v string) error {
		if auto && v == "auto" {
			*p = -1
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1_000_000 {
			if auto {
				return fmt.Errorf("want auto or an integer from 0 to 1000000, got %q", v)
			}
			return fmt.Errorf("want an integer from 0 to 1000000, got %q", v)
		}
		*p = n
		return nil
	}}
}

// rangeSetter reads a count from lo to hi.
func rangeSetter(p *int, lo, hi int) setter {
	return setter{"count", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("want an integer from %d to %d, got %q", lo, hi, v)
		}
		*p = n
		return nil
	}}
}

// autoCountSetter is countSetter that also takes auto (stored as -1).
func autoCountSetter(p *int) setter {
	c := countSetter(p)
	return setter{"auto|count", func(v string) error {
		if v == "auto" {
			*p = -1
			return nil
		}
		if err := c.fn(v); err != nil {
			return fmt.Errorf("want auto or an integer from 0 to 256, got %q", v)
		}
		return nil
	}}
}

func countSetter(p *int) setter {
	return setter{"count", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 256 {
			return fmt.Errorf("want an integer from 0 to 256, got %q", v)
		}
		*p = n
		return nil
	}}
}

func boolSetter(p *bool) setter {
	return setter{"true|false", func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		*p = b
		return nil
	}}
}

// memSetter reads a memory size: bytes, with a K, M, G or T suffix
// (binary; KiB, MB and the like are read the same), or a percentage of
// MemTotal; 0 is no limit.
func memSetter(p *int64) setter {
	return setter{"bytes|N%", func(v string) error {
		n, err := parseMemory(v)
		if err != nil {
			return err
		}
		if n != 0 && n < minRuntimeMemory {
			return fmt.Errorf("%q is %d bytes, less than a runtime needs to start (%d MiB); give at least %dM, or 0 for no limit", v, n, minRuntimeMemory>>20, minRuntimeMemory>>20)
		}
		*p = n
		return nil
	}}
}

// sizeSetter reads bytes, with K, M, G or T (binary); 0 is kept as 0.
func sizeSetter(p *int64) setter {
	return setter{"bytes", func(v string) error {
		n, err := api.ParseSize(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return fmt.Errorf("want bytes, with K, M, G or T (binary), or 0, got %q", v)
		}
		*p = n
		return nil
	}}
}

// totalPidsSetter takes a count of processes, or a percentage of the
// machine's pid_max.
func totalPidsSetter(p *int64) setter {
	return setter{"N|N%", func(v string) error {
		s := strings.TrimSpace(v)
		if pct, ok := strings.CutSuffix(s, "%"); ok {
			f, err := strconv.ParseFloat(pct, 64)
			if err != nil || f < 0 || f > 100 {
				return fmt.Errorf("want a percentage from 0 to 100, got %q", v)
			}
			b, err := os.ReadFile("/proc/sys/kernel/pid_max")
			if err != nil {
				return fmt.Errorf("%q: read the machine's pid_max: %v; give a number instead", v, err)
			}
			max, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return fmt.Errorf("%q: the machine's pid_max %q: %v", v, b, err)
			}
			*p = int64(f / 100 * float64(max))
			return nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("want a count of processes or a percentage, got %q", v)
		}
		if n != 0 && n < 64 {
			return fmt.Errorf("%q is fewer processes than runtimes need to start; give at least 64, or 0 for no limit", v)
		}
		*p = n
		return nil
	}}
}

// minRuntimeMemory is the smallest memory limit accepted: a kernel needs
// tens of MiB to start.
const minRuntimeMemory = 64 << 20

func parseMemory(v string) (int64, error) {
	s := strings.TrimSpace(v)
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(pct, 64)
		if err != nil || f < 0 || f > 100 {
			return 0, fmt.Errorf("want a percentage from 0 to 100, got %q", v)
		}
		total, err := memTotal()
		if err != nil {
			return 0, fmt.Errorf("%q: read the machine's memory: %v; give bytes instead", v, err)
		}
		return int64(f / 100 * float64(total)), nil
	}
	n, err := api.ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("want bytes (512M, 2G, 1073741824), a percentage of the machine's memory (25%%) or 0, got %q", v)
	}
	return n, nil
}

// memTotal is the machine's memory in bytes, from /proc/meminfo.
func memTotal() (int64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no MemTotal in /proc/meminfo")
}

func pidsSetter(p *int64) setter {
	return setter{"count", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || (n > 0 && n < 8) {
			return fmt.Errorf("want 0 (no limit) or a count of at least 8 (a kernel runs several threads), got %q", v)
		}
		*p = n
		return nil
	}}
}

func cpuSetter(p *float64) setter {
	return setter{"cores", func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || (f > 0 && f < 0.01) {
			return fmt.Errorf("want 0 (no limit) or a number of cores of at least 0.01, got %q", v)
		}
		*p = f
		return nil
	}}
}

// listAppender adds each comma-separated item to p: a flag that may be
// repeated, and whose variable holds a list.
func listAppender(p *[]string) setter {
	return setter{"list", func(v string) error {
		*p = append(*p, splitList(v)...)
		return nil
	}}
}

// weightSetter reads 0 or a ratio from 1/256 to 256.
func weightSetter(p *float64) setter {
	return setter{"ratio", func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > 256 || (f > 0 && f < 1.0/256) {
			return fmt.Errorf("want 0 or a ratio from 0.00390625 (1/256) to 256, got %q", v)
		}
		*p = f
		return nil
	}}
}

func levelSetter(p *slog.Level) setter {
	return setter{"debug|info|warn|error", func(v string) error { return p.UnmarshalText([]byte(v)) }}
}

// kind is what the setting holds, as --help shows it.
func (s setting) kind() string {
	if k := kinds[s.flag]; k != "" {
		return k
	}
	return s.set.kind
}

// secretFlags are the settings that hold a secret, with the flag that
// reads it from a file. They are set by their variable or that file, never
// on the command line: /proc/PID/cmdline is readable by every local user.
var secretFlags = map[string]string{"token": "token-file", "jupyter-token": "jupyter-token-file"}

// envAliases are variables read when a setting's AIO_* variable is unset:
// the AIO sandbox's names, so its deployments configure aiod unchanged.
var envAliases = map[string]string{
	"AIO_JWT_PUBLIC_KEY":     "JWT_PUBLIC_KEY",
	"AIO_TICKET_TTL_SECONDS": "TICKET_TTL_SECONDS",
}

// parseOptions reads defaults, then AIO_* variables (or their aliases),
// then flags, and checks that the settings can work together. Every error
// it returns is a *usageError, one line that names the setting, its value
// and the fix.
func parseOptions(args []string, lookup func(string) (string, bool), out io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("aiod", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by main
	sets := o.settings()
	from := map[string]string{} // flag -> where its value came from: "--flag" or the variable
	var onCmdline []setting     // secret settings given as flags
	for _, s := range sets {
		v, src := s.def, s.env
		if e, ok := lookup(s.env); ok && e != "" {
			v = e
			from[s.flag] = s.env
		} else if alias := envAliases[s.env]; alias != "" {
			if e, ok := lookup(alias); ok && e != "" {
				v, src = e, alias
				from[s.flag] = alias
			}
		}
		if v != "" {
			if err := s.set.fn(v); err != nil {
				return nil, &usageError{fmt.Sprintf("%s: %v", src, err)}
			}
		}
		fn := s.set.fn
		name := s.flag
		if secretFlags[name] != "" {
			// Registered so that it is recognised and refused below; the
			// value is dropped unread, and never quoted in an error.
			fs.Func(name, s.help, func(string) error {
				onCmdline = append(onCmdline, s)
				return nil
			})
			continue
		}
		fs.Func(s.flag, s.help, func(v string) error {
			from[name] = "--" + name
			return fn(v)
		})
	}
	version := false
	fs.BoolFunc("version", "print the version, the Go version and the commit, and exit", func(string) error { version = true; return nil })
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(out, sets)
			return nil, errHelp
		}
		return nil, &usageError{err.Error() + " (aiod --help lists the flags)"}
	}
	if version {
		return nil, errVersion
	}
	if fs.NArg() > 0 {
		return nil, &usageError{fmt.Sprintf("unexpected arguments: %s (aiod takes flags only; see aiod --help)", strings.Join(fs.Args(), " "))}
	}
	if len(onCmdline) > 0 {
		s := onCmdline[0]
		return nil, &usageError{fmt.Sprintf("--%s: a secret on the command line can be read by every local user (/proc/PID/cmdline); set %s, or put it in a file and give --%s FILE",
			s.flag, s.env, secretFlags[s.flag])}
	}
	name := func(flag string) string {
		if f := from[flag]; f != "" {
			return f
		}
		return "--" + flag
	}
	if err := o.readFiles(name); err != nil {
		return nil, err
	}
	if err := o.check(name); err != nil {
		return nil, err
	}
	return o, nil
}

// readFiles reads the settings given as files: the API token, the Jupyter
// server's token and the JWT public key. A file that cannot be read, or is
// empty, is refused by name; so is a setting given both ways.
func (o *options) readFiles(name func(flag string) string) error {
	for _, f := range []struct {
		file, flag, path string
		dst              *string
	}{
		{"token-file", "token", o.tokenFile, &o.token},
		{"jupyter-token-file", "jupyter-token", o.jupyterTokenFile, &o.jupyterToken},
		{"jwt-public-key-file", "jwt-public-key", o.jwtPublicKeyFile, &o.jwtPublicKey},
	} {
		path := f.path
		if path == "" {
			continue
		}
		if *f.dst != "" {
			return &usageError{fmt.Sprintf("%s and %s are both set: give one", name(f.file), name(f.flag))}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return &usageError{fmt.Sprintf("%s %q: %v; give a file aiod can read", name(f.file), path, unwrapPath(err))}
		}
		v := strings.TrimRight(string(b), "\r\n")
		if strings.TrimSpace(v) == "" {
			return &usageError{fmt.Sprintf("%s %q: the file is empty; write the value in it", name(f.file), path)}
		}
		*f.dst = v
	}
	return nil
}

// unwrapPath drops the path an *os.PathError repeats.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// check refuses settings that cannot work, before anything starts; name
// says how the user set a flag ("--workdir" or "AIO_WORKDIR").
func (o *options) check(name func(flag string) string) error {
	switch o.codeBackend {
	case "auto", "native", "kernel":
	default:
		return &usageError{fmt.Sprintf("%s %q: want auto, native or kernel", name("code-backend"), o.codeBackend)}
	}
	if o.kernelStart != "fork" && o.kernelStart != "spawn" {
		return &usageError{fmt.Sprintf("%s %q: want fork or spawn", name("kernel-start"), o.kernelStart)}
	}
	switch o.kernelTransport {
	case "auto", "ipc", "tcp":
	default:
		return &usageError{fmt.Sprintf("%s %q: want auto, ipc or tcp", name("kernel-transport"), o.kernelTransport)}
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		return &usageError{fmt.Sprintf("%s %q: want text or json", name("log-format"), o.logFormat)}
	}
	if o.defaultTimeout > o.maxTimeout {
		return &usageError{fmt.Sprintf("%s %g is more than %s %g (a call without a timeout would get more than the maximum); lower %s or raise %s",
			name("default-timeout"), o.defaultTimeout.Seconds(), name("max-timeout"), o.maxTimeout.Seconds(),
			name("default-timeout"), name("max-timeout"))}
	}
	if o.runtimeUser != "" {
		if _, err := isolate.LookupUser(o.runtimeUser); err != nil {
			return &usageError{fmt.Sprintf("%s: %v; give an existing unprivileged account", name("runtime-user"), err)}
		}
		if os.Geteuid() != 0 {
			return &usageError{fmt.Sprintf("%s %q: aiod runs as uid %d, and only root can run runtimes as another user; run aiod as root or unset %s",
				name("runtime-user"), o.runtimeUser, os.Geteuid(), name("runtime-user"))}
		}
	}
	switch o.isolation {
	case "auto", "tenant", "none":
	default:
		return &usageError{fmt.Sprintf("%s %q: want auto, tenant or none", name("isolation"), o.isolation)}
	}
	switch o.runtimeNetwork {
	case "none", "host", "allow":
	default:
		return &usageError{fmt.Sprintf("%s %q: want none, allow or host", name("runtime-network"), o.runtimeNetwork)}
	}
	for _, v := range o.volumes {
		if _, err := sandbox.ParseVolume(v); err != nil {
			return &usageError{fmt.Sprintf("%s: %v", name("volume"), err)}
		}
	}
	if _, err := sandbox.ParseEgress(splitList(o.egressAllow)); err != nil {
		return &usageError{fmt.Sprintf("%v (%s)", err, name("egress-allow"))}
	}
	if o.egressAllow != "" && o.runtimeNetwork != "allow" {
		return &usageError{fmt.Sprintf("%s is set, but %s is %s: the list applies with %s allow",
			name("egress-allow"), name("runtime-network"), o.runtimeNetwork, name("runtime-network"))}
	}
	if o.isolation == "tenant" && o.runtimeUser != "" {
		return &usageError{fmt.Sprintf("%s %q and %s tenant: under tenant isolation every tenant runs as a uid of its own (%s); drop %s",
			name("runtime-user"), o.runtimeUser, name("isolation"), name("tenant-uids"), name("runtime-user"))}
	}
	if o.isolation == "tenant" && o.kernelTransport == "tcp" {
		return &usageError{fmt.Sprintf("%s tcp and %s tenant: a tenant's kernels listen in its own network namespace, out of aiod's reach over TCP; use ipc (the default)",
			name("kernel-transport"), name("isolation"))}
	}
	if o.stateDir == "" {
		return &usageError{fmt.Sprintf("%s is empty: give a folder for aiod's state", name("state-dir"))}
	}
	if o.maxStarts == 0 {
		return &usageError{fmt.Sprintf("%s 0: no runtime could ever start; set it to auto or 1 or more", name("max-concurrent-starts"))}
	}
	if err := o.checkCluster(name); err != nil {
		return err
	}
	if o.workdir != "" {
		fi, err := os.Stat(o.workdir)
		switch {
		case err != nil && errors.Is(err, os.ErrNotExist):
			return &usageError{fmt.Sprintf("%s %q: no such folder; create it, or set %s to an existing folder", name("workdir"), o.workdir, name("workdir"))}
		case err != nil:
			return &usageError{fmt.Sprintf("%s %q: %v; set %s to a folder aiod can use", name("workdir"), o.workdir, err, name("workdir"))}
		case !fi.IsDir():
			return &usageError{fmt.Sprintf("%s %q: not a folder; set %s to a folder", name("workdir"), o.workdir, name("workdir"))}
		}
	}
	return nil
}

// printUsage is --help: every flag with what it holds, its variable and
// its default.
func printUsage(out io.Writer, sets []setting) {
	fmt.Fprint(out, "Usage: aiod [flags]\n\nEvery flag can also be set by its AIO_* variable; a flag wins over its variable.\n\n")
	for _, s := range sets {
		def := s.def
		if def == "" {
			def = "none"
		}
		if file := secretFlags[s.flag]; file != "" {
			fmt.Fprintf(out, "  %s %s\n    \t%s\n    \t(a variable, or --%s: never on the command line, which every local user can read)\n", s.env, s.kind(), s.help, file)
			continue
		}
		fmt.Fprintf(out, "  --%s %s\n    \t%s\n    \t(env %s, default %s)\n", s.flag, s.kind(), s.help, s.env, def)
	}
	fmt.Fprint(out, "  --version\n    \tprint the version, the Go version and the commit, and exit\n  --help\n    \tprint this and exit\n")
	fmt.Fprint(out, "\nEnvironment read besides the AIO_* variables:\n"+
		"  KERNEL_*            passed to every kernel started on --jupyter-endpoint (e.g. KERNEL_USERNAME for Enterprise Gateway)\n"+
		"  JWT_PUBLIC_KEY      read when AIO_JWT_PUBLIC_KEY is unset\n"+
		"  TICKET_TTL_SECONDS  read when AIO_TICKET_TTL_SECONDS is unset\n"+
		"  GOMEMLIMIT          wins over --memory-limit\n"+
		"  GOMAXPROCS          processors for aiod's own Go code (default: half the CPUs, at least one)\n"+
		"  AIO_SYSMON_AWAKE    0: do not restart with GODEBUG=schedtrace=MAX to keep Go's monitor thread from parking (default on; docs/performance.md)\n")
}

// checkCluster reads the cluster's secret and refuses cluster settings
// that cannot work.
func (o *options) checkCluster(name func(flag string) string) error {
	if o.clusterNATS == "" {
		for _, f := range []struct{ flag, v string }{{"cluster-advertise", o.clusterAdvertise}, {"cluster-secret-file", o.clusterSecretFile}} {
			if f.v != "" {
				return &usageError{fmt.Sprintf("%s is set without %s: give the NATS system's URLs too, or drop it", name(f.flag), name("cluster-nats"))}
			}
		}
		return nil
	}
	if o.clusterSecretFile == "" {
		return &usageError{fmt.Sprintf("%s needs %s: a file holding a secret all replicas share (e.g. head -c 32 /dev/urandom | base64 > FILE)", name("cluster-nats"), name("cluster-secret-file"))}
	}
	b, err := os.ReadFile(o.clusterSecretFile)
	if err != nil {
		return &usageError{fmt.Sprintf("%s %q: %v; give a file aiod can read", name("cluster-secret-file"), o.clusterSecretFile, unwrapPath(err))}
	}
	if o.clusterSecret = []byte(strings.TrimRight(string(b), "\r\n")); len(o.clusterSecret) < 16 {
		return &usageError{fmt.Sprintf("%s %q: the secret has %d bytes, fewer than 16; write a longer one (e.g. head -c 32 /dev/urandom | base64)", name("cluster-secret-file"), o.clusterSecretFile, len(o.clusterSecret))}
	}
	if o.clusterAdvertise != "" {
		return checkAdvertise(o.clusterAdvertise, name("cluster-advertise"))
	}
	return nil
}

// checkAdvertise refuses an address other replicas could not reach this
// one at; how names the setting it came from.
func checkAdvertise(addr, how string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "0" || port == "" {
		return &usageError{fmt.Sprintf("%s %q: want the HOST:PORT the other replicas reach this one at", how, addr)}
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return &usageError{fmt.Sprintf("%s %q is an address to listen on, not one to be reached at: set --cluster-advertise to this machine's address as the other replicas see it", how, addr)}
	}
	return nil
}

func (o *options) gatewayConfig(log *slog.Logger) gateway.Config {
	c := gateway.Config{
		DefaultTimeout: o.defaultTimeout, MaxTimeout: o.maxTimeout,
		KernelIdle: o.kernelIdle, NativeIdle: o.nativeIdle, TenantIdle: o.tenantIdle,
		OutputBudget: o.outputBudget, MaxBody: o.maxBody, HeldCodeTenant: int64(o.heldTenant), HeldCodeTotal: int64(o.heldTotal),
		CodeBackend: o.codeBackend, KernelName: o.kernelName,
		KernelStartTimeout: o.kernelStartTimeout, NativeStartTimeout: o.nativeStartTimeout, Workdir: o.workdir, Logger: log,
		Token: o.token, AllowedOrigins: splitList(o.allowedOrigins),
		AllowedHosts: splitList(o.allowedHosts), JWTPublicKey: o.jwtPublicKey, TicketTTL: o.ticketTTL,
		MaxTicketsPerCaller: o.maxTicketsPerCall, MaxConnsPerIP: o.maxConnsPerIP,
		KernelPrewarm: o.prewarm(), CodePrewarm: o.codePrewarm, NoKernelWarmup: !o.kernelWarmup,
		KernelStart: o.kernelStart, KernelTransport: strings.TrimPrefix(o.kernelTransport, "auto"),
		JupyterEndpoint: o.jupyterEndpoint, JupyterToken: o.jupyterToken, JupyterKernel: o.jupyterKernel,
		JupyterStartTimeout: o.jupyterStart, JupyterProbeInterval: o.jupyterProbe,
		WSQueueBytes: o.wsQueueBytes, WriteTimeout: o.writeTimeout, NoAccessLog: !o.accessLog, MetricsPublic: o.metricsPublic,
		ExecutionRetention: o.execRetention, ExecutionRetentionBytes: o.execRetentionBytes,
		SnapshotMaxBytes: int64(o.snapMaxBytes), SnapshotTotalBytes: int64(o.snapTotalBytes), SnapshotTenantBytes: int64(o.snapTenantBytes), SnapshotRetention: o.snapRetention,
		Admission: o.admission(),
		Cluster: gateway.ClusterConfig{NATS: o.clusterNATS, Advertise: o.clusterAdvertise, Secret: o.clusterSecret, Lease: o.clusterLease,
			Checkpoint: o.clusterCheckpoint, FilesMax: o.clusterFilesMax},
	}
	c.Isolation.MemoryBytes, c.Isolation.Pids, c.Isolation.CPU = o.runtimeMemory, o.runtimePids, o.runtimeCPU
	c.Isolation.TotalMemoryBytes, c.Isolation.RuntimesCPUWeight = o.runtimesMemory, o.runtimesCPUWeight
	c.Isolation.TotalPids = o.runtimesPids
	c.Isolation.TenantMemoryBytes, c.Isolation.TenantPids = o.tenantMemory, o.tenantPids
	c.Isolation.User, c.Isolation.EnvAllow = o.runtimeUser, splitList(o.runtimeEnvAllow)
	c.Isolation.Isolation, c.Isolation.StateDir, c.Isolation.Network = o.isolation, o.stateDir, o.runtimeNetwork
	c.Isolation.Ptys = o.runtimePtys
	c.Isolation.FirstUID, c.Isolation.LastUID = o.tenantUIDs[0], o.tenantUIDs[1]
	c.Isolation.Egress, _ = sandbox.ParseEgress(splitList(o.egressAllow)) // checked by check
	for _, v := range o.volumes {
		vol, _ := sandbox.ParseVolume(v) // checked by check
		c.Isolation.Volumes = append(c.Isolation.Volumes, vol)
	}
	if o.kernelTransport == "tcp" && o.isolation == "auto" {
		c.Isolation.Isolation = "none"
		c.Isolation.NoneBecause = "--kernel-transport tcp: a tenant's kernels listen in its own network namespace, out of aiod's reach over TCP"
	}
	if c.Isolation.EnvAllow == nil {
		c.Isolation.EnvAllow = []string{} // given empty: nothing passes
	}
	return c
}

// prewarm is --kernel-prewarm with auto resolved.
func (o *options) prewarm() int {
	if o.kernelPrewarm >= 0 {
		return o.kernelPrewarm
	}
	return backend.DefaultKernelPrewarm(o.kernelStart, o.admission().MaxSessions)
}

// admission is the session caps and start queue, with auto resolved.
func (o *options) admission() stream.Admission {
	a := stream.Admission{MaxSessions: o.maxSessions, MaxSessionsPerKey: o.maxSessionsPerKey,
		MaxStarts: o.maxStarts, StartQueue: o.startQueue, StartQueueWait: o.startQueueWait}
	if a.MaxSessions < 0 {
		a.MaxSessions = backend.DefaultMaxSessions(o.kernelStart)
	}
	if a.MaxStarts < 0 {
		a.MaxStarts = backend.DefaultMaxStarts()
	}
	return a
}

// defaultStateDir is /var/lib/aiod for root, else the user's state folder.
func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/aiod"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "aiod")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "aiod")
	}
	return filepath.Join(os.TempDir(), "aiod-state")
}

// uidRangeSetter reads FIRST-LAST uids (both above 0, at most 2^31-1).
func uidRangeSetter(p *[2]uint32) setter {
	return setter{"auto|first-last", func(v string) error {
		if v == "auto" {
			p[0], p[1] = 0, 0
			return nil
		}
		a, b, ok := strings.Cut(v, "-")
		first, err1 := strconv.ParseUint(strings.TrimSpace(a), 10, 31)
		last, err2 := strconv.ParseUint(strings.TrimSpace(b), 10, 31)
		if !ok || err1 != nil || err2 != nil || first == 0 || last < first {
			return fmt.Errorf("want auto or FIRST-LAST uids, 1 <= FIRST <= LAST < 2147483648, got %q", v)
		}
		p[0], p[1] = uint32(first), uint32(last)
		return nil
	}}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
