package netproc

import (
	"errors"
	"time"

	"github.com/dryexec/dryexec/netsim/netconf"
)

// The protocol between the parent and the role, over one socketpair (the
// role's descriptor 3): the parent writes one Setup; the role answers with a
// stream of Msg, one JSON value each, ending with MsgDone. The parent ends
// the network by shutting down its writing side (the role reads EOF); the
// role ends it by exiting, and a role that exits without MsgDone crashed.
// Between the Setup and the EOF the parent may write Control messages: a
// sync, which the role answers with MsgSynced behind every event it had
// logged when it read the sync (Proc.Sync).

// Setup is everything the role needs, read once before it confines itself.
type Setup struct {
	// MockFile, Allow, Seed, MaxBodyBytes and MaxEvents are netconf.Config's.
	MockFile     string         `json:"mock_file,omitempty"`
	Allow        []netconf.Rule `json:"allow,omitempty"`
	Seed         uint64         `json:"seed"`
	MaxBodyBytes int            `json:"max_body_bytes,omitempty"`
	MaxEvents    int            `json:"max_events,omitempty"`
	// SniffTimeout is netconf.Config's.
	SniffTimeout time.Duration `json:"sniff_timeout,omitempty"`
	// CA is the content of the CA's file (ca.FileName).
	CA []byte `json:"ca"`
	// Env and Files are the values credential injection refers to, read by
	// the parent: the role reads no environment and no secret file itself.
	Env   map[string]string `json:"env,omitempty"`
	Files map[string][]byte `json:"files,omitempty"`
	// Roots are the PEM certificates allowed HTTPS is verified against (the
	// host's system roots): the role cannot read the host's trust store.
	Roots []byte `json:"roots,omitempty"`
	// Link says what the role's descriptor 4 is: LinkTUN ("") the socket
	// the sandbox's TUN device arrives on, LinkEthernet the link itself.
	Link string `json:"link,omitempty"`
}

// Links the role serves (Setup.Link).
const (
	// LinkTUN: descriptor 4 is a unix socket; the sandbox sends its TUN
	// device over it (SCM_RIGHTS), and netsim serves that.
	LinkTUN = ""
	// LinkEthernet: descriptor 4 is a datagram socket of Ethernet frames,
	// one per datagram, whose other end is a VM's NIC (QEMU's -netdev
	// dgram); netsim serves it as it is (netsim.Sim.ServeEthernet).
	LinkEthernet = "ethernet"
)

// Kinds of Msg.
const (
	// MsgReady: the Sim is made and the role is confined; Confinement says
	// how.
	MsgReady = "ready"
	// MsgRecord carries one logged event (Kept false: counted in Dropped).
	MsgRecord = "record"
	// MsgQuiet: the role takes no more packets and every event is sent.
	MsgQuiet = "quiet"
	// MsgDone ends the stream: Err is why serving failed ("" when it
	// ended as asked).
	MsgDone = "done"
	// MsgSynced answers the Control sync of the same Seq: every event the
	// role logged before it read that sync came before this message.
	MsgSynced = "synced"
)

// CtrlSync is the kind of Control that asks for a MsgSynced.
const CtrlSync = "sync"

// Control is one message from the parent after the Setup.
type Control struct {
	Kind string `json:"kind"`
	Seq  uint64 `json:"seq"`
}

// Msg is one message from the role.
type Msg struct {
	Kind   string          `json:"kind"`
	Record *netconf.Record `json:"record,omitempty"`
	Kept   bool            `json:"kept,omitempty"`
	// Err and BadConfig (Err is a netconf.ErrBadConfig) end the stream.
	Err       string `json:"err,omitempty"`
	BadConfig bool   `json:"bad_config,omitempty"`
	// Confinement is what the role applied to itself (MsgReady).
	Confinement *Confinement `json:"confinement,omitempty"`
	// Seq is the sync a MsgSynced answers.
	Seq uint64 `json:"seq,omitempty"`
}

// Confinement says what the role process runs under.
type Confinement struct {
	UID, GID int
	// Landlock is the ABI of the domain the role runs in (0: none; the
	// kernel has no Landlock).
	Landlock int
	// Seccomp says the allow list is installed on every thread.
	Seccomp bool
	// NoNewPrivs is the role's no_new_privs bit.
	NoNewPrivs bool
	// CapEff is the role's effective capability set (0 once confined).
	CapEff uint64
}

// ErrCrashed: the role process ended without finishing its stream (killed,
// crashed, or refused something by its own confinement). The trial's
// network ended there.
var ErrCrashed = errors.New("netsim process ended unexpectedly")
