package sandbox

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompData is struct seccomp_data (nr, arch, instruction pointer,
// args) as x/net/bpf's VM reads it: the kernel loads seccomp's 32-bit words
// in host order, the VM (made for packets) in network order, so each word
// is written big-endian, a 64-bit argument as its low word then its high.
func seccompData(arch uint32, nr int32, args ...uint64) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(nr))
	b = binary.BigEndian.AppendUint32(b, arch)
	b = binary.BigEndian.AppendUint64(b, 0)
	for i := 0; i < 6; i++ {
		var a uint64
		if i < len(args) {
			a = args[i]
		}
		b = binary.BigEndian.AppendUint32(b, uint32(a))
		b = binary.BigEndian.AppendUint32(b, uint32(a>>32))
	}
	return b
}

// TestFilterDecisions runs the filter in x/net/bpf's VM on the calls it
// must refuse and a few it must let through.
func TestFilterDecisions(t *testing.T) {
	prog, err := Filter()
	if err != nil {
		t.Fatal(err)
	}
	var raw []bpf.RawInstruction
	for i := 0; i < len(prog); i += 8 {
		raw = append(raw, bpf.RawInstruction{Op: binary.NativeEndian.Uint16(prog[i:]), Jt: prog[i+2], Jf: prog[i+3],
			K: binary.NativeEndian.Uint32(prog[i+4:])})
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("the filter does not disassemble")
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	const x86_64, i386 = 0xc000003e, 0x40000003
	const allow, eperm, enosys, kill = 0x7fff0000, 0x00050000 | 1, 0x00050000 | 38, 0x80000000
	for _, c := range []struct {
		name string
		arch uint32
		nr   int32
		args []uint64
		want uint32
	}{
		{"read", x86_64, unix.SYS_READ, nil, allow},
		{"clone for a thread", x86_64, unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_THREAD}, allow},
		{"clone into a user namespace", x86_64, unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER}, eperm},
		{"clone3", x86_64, unix.SYS_CLONE3, nil, enosys},
		{"mount", x86_64, unix.SYS_MOUNT, nil, eperm},
		{"unshare", x86_64, unix.SYS_UNSHARE, nil, eperm},
		{"ptrace", x86_64, unix.SYS_PTRACE, nil, eperm},
		{"bpf", x86_64, unix.SYS_BPF, nil, eperm},
		{"io_uring_setup", x86_64, unix.SYS_IO_URING_SETUP, nil, eperm},
		{"keyctl", x86_64, unix.SYS_KEYCTL, nil, eperm},
		{"x32 ABI", x86_64, unix.SYS_READ | 0x40000000, nil, enosys},
		{"i386 ABI (int 0x80)", i386, 21 /* i386 mount */, nil, kill},
	} {
		got, err := vm.Run(seccompData(c.arch, c.nr, c.args...))
		if err != nil {
			t.Fatal(err)
		}
		if uint32(got) != c.want {
			t.Errorf("%s: 0x%x, want 0x%x", c.name, got, c.want)
		}
	}
}
