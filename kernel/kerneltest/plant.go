package kerneltest

import "strings"

// PlantStartupCode is Python that plants, in the HOME of the runtime that
// runs it, what a hostile tenant would: an IPython startup file (a kernel
// started later runs it) and HOME/plant.js, a Node.js preload for
// NODE_OPTIONS=--require. Each writes its /proc/self/cgroup to
// HOME/cg-LANG.txt and starts `sleep 600` in a session of its own, whose pid
// it writes to HOME/stray-LANG.txt (LANG: python, javascript). It prints
// HOME.
const PlantStartupCode = `import os
h = os.path.expanduser("~")
d = h + "/.ipython/profile_default/startup"
os.makedirs(d, exist_ok=True)
open(d + "/00-plant.py", "w").write('''import os, subprocess
h = os.path.expanduser("~")
open(h + "/cg-python.txt", "w").write(open("/proc/self/cgroup").read())
p = subprocess.Popen(["sleep", "600"], start_new_session=True)
open(h + "/stray-python.txt", "w").write(str(p.pid))
''')
open(h + "/plant.js", "w").write('''const fs = require('fs'), os = require('os'), cp = require('child_process');
fs.writeFileSync(os.homedir() + '/cg-javascript.txt', fs.readFileSync('/proc/self/cgroup'));
const c = cp.spawn('sleep', ['600'], {detached: true, stdio: 'ignore'}); c.unref();
fs.writeFileSync(os.homedir() + '/stray-javascript.txt', String(c.pid));
''')
print(h)`

// ReadPlanted is code of lang (python or javascript), run in a runtime of
// the tenant's whose HOME is home, that prints what PlantStartupCode's
// planted code of that language left: its cgroups, "@", the stray pid.
func ReadPlanted(lang, home string) string {
	if lang == "javascript" {
		return `const fs = require('fs'); console.log(fs.readFileSync('` + home + `/cg-javascript.txt', 'utf8') + '@' + fs.readFileSync('` + home + `/stray-javascript.txt', 'utf8'))`
	}
	return `print(open("` + home + `/cg-python.txt").read() + "@" + open("` + home + `/stray-python.txt").read())`
}

// OutsideGroups lists the controllers among pids and memory whose line of
// cgroup (a /proc/PID/cgroup) is not under a folder containing own.
func OutsideGroups(cgroup, own string) []string {
	var out []string
	for _, ctl := range []string{"pids", "memory"} {
		found := false
		for _, line := range strings.Split(cgroup, "\n") {
			if strings.Contains(line, ":"+ctl+":") {
				found = strings.Contains(line, own)
			}
		}
		if !found {
			out = append(out, ctl)
		}
	}
	return out
}
