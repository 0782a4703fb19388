package vm

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim/tun"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/wire"
)

// vmNet is a VM's network: the same netsim as an ns sandbox's (its own
// confined role process, the policy, mocks, CA and log: linuxns.Net), here
// serving the Ethernet frames of the VM's virtio-net, which QEMU sends and
// takes on a datagram socket (-netdev dgram) whose other end netsim holds.
// In the VM the init configures the NIC as the ns guest does its TUN device
// (guest vmNetUp); on the host the view guest binds netsim's resolv.conf
// and trust bundle into the view, and the command gets the trust variables.
//
// Lifetime, for a trial or a session: startNet, start the view guest with
// File among its descriptors (QEMU inherits it), serve, give the view guest
// viewStart's fields and QEMU netArgs, ready before the command runs, then
// close once QEMU is gone and report into the delta (a session reads
// net.Log).
type vmNet struct {
	net      *linuxns.Net
	trustEnv []string // netsim's trust variables for the command
	// trustBundle and trustPath: netsim's trust bundle and where it goes,
	// for a VM that binds it itself (on an image: trial.innerStart).
	trustBundle []byte
	trustPath   string
}

// startNet starts the network specs ask for (TrialSpec.Net; none: netsim
// with nothing allowed, every attempt logged, as on ns) without waiting for
// netsim, whose start then overlaps the VM's boot: call ready before the
// command runs. caDir holds netsim's CA; id seeds the mocks.
func startNet(specs []string, caDir, id string) (*vmNet, error) {
	n, err := linuxns.StartEthernetNet(specs, caDir, id)
	if err != nil {
		return nil, err
	}
	return &vmNet{net: n}, nil
}

// ready waits until netsim is made and confined: a bad configuration (a
// mock file that does not compile) is a dryexec.ErrBadAction.
func (n *vmNet) ready(ctx context.Context) error { return n.net.Ready(ctx) }

// File is QEMU's end of the frame socket, to pass to the view guest (which
// becomes QEMU); nil without a netsim.
func (n *vmNet) File() *os.File { return n.net.GuestFile() }

// serve lets netsim serve the frames; call it once the view guest runs
// (it holds QEMU's end): our copy of that end is closed.
func (n *vmNet) serve() { n.net.Serve(context.Background()) }

// viewStart fills what the view guest binds into the view (netsim's
// resolv.conf and trust bundle; no TUN device: the VM's NIC is QEMU's) and
// keeps the trust variables for the command.
func (n *vmNet) viewStart(start *wire.TrialStart) {
	if n.File() == nil {
		return
	}
	var ss wire.SessionStart
	n.net.SetupSession(&ss, 0)
	start.Net, start.NetFilesOnly = true, true
	start.TrustBundle, start.TrustPath = ss.TrustBundle, ss.TrustPath
	n.trustEnv = ss.Env
	n.trustBundle, n.trustPath = ss.TrustBundle, ss.TrustPath
}

// Args are QEMU's arguments for the VM's NIC on fd (QEMU's number of
// File): a virtio-net device with tun.GuestMAC on a datagram socket
// backend, one Ethernet frame per datagram. QEMU offers the guest no
// checksum or segmentation offload over a socket backend, so every frame
// is a whole packet with its checksums, as netsim's stack wants them.
func netArgs(fd int) []string {
	return []string{"-netdev", "dgram,id=net0,local.type=fd,local.str=" + strconv.Itoa(fd),
		"-device", "virtio-net-device,netdev=net0,mac=" + tun.GuestMAC}
}

// close stops netsim once QEMU is gone (every frame the VM sent is queued
// on the socket: netsim drains and logs it first) and waits for it: the log
// is final after it.
func (n *vmNet) close() { n.net.Close() }

// report puts the network's part of the delta in d before the walk: the
// log, a warning, the exchanges' bodies for the store.
func (n *vmNet) report(spec dryexec.TrialSpec, d *dryexec.StateDelta) {
	d.Network = n.net.Log()
	if w := n.net.Warning(); w != "" {
		d.Warnings = append(d.Warnings, w)
	}
	if recs := n.net.Records(); spec.Exchanges != nil && len(recs) > 0 {
		b, err := json.Marshal(recs)
		if err == nil {
			err = spec.Exchanges.PutExchanges(b)
		}
		if err != nil {
			d.Warnings = append(d.Warnings, "the network exchanges' bodies were not kept: "+err.Error())
		}
	}
}

// crashed marks d incomplete when netsim's process died before it was
// told to stop, as on ns: attempts after that point reached nothing and
// were not logged, so the delta's network is not the whole story.
func (n *vmNet) crashed(d *dryexec.StateDelta) {
	why := n.net.Ended()
	if why == "" || d == nil {
		return
	}
	d.Incomplete = true
	d.IncompleteReason = strings.TrimPrefix(d.IncompleteReason+"; "+why, "; ")
	d.Normalize()
	d.ComputeTotals()
}
