package firecracker

// The API's bodies, with the field names and shapes of Firecracker's
// published OpenAPI spec (src/firecracker/swagger/firecracker.yaml). Only
// what the vm rung needs is here; every optional field is omitempty so that
// a body says what dryexec chose and nothing else (Firecracker's config
// types refuse unknown fields, and some versions lack newer optional ones).

// MachineConfig is PUT /machine-config's body.
type MachineConfig struct {
	// VCPUCount is 1..32 (with SMT: 1 or even).
	VCPUCount int `json:"vcpu_count"`
	// MemSizeMiB is the guest's RAM.
	MemSizeMiB int64 `json:"mem_size_mib"`
	SMT        bool  `json:"smt,omitempty"`
	// TrackDirtyPages allows diff snapshots; parking takes full ones.
	TrackDirtyPages bool `json:"track_dirty_pages,omitempty"`
}

// BootSource is PUT /boot-source's body.
type BootSource struct {
	KernelImagePath string `json:"kernel_image_path"`
	InitrdPath      string `json:"initrd_path,omitempty"`
	BootArgs        string `json:"boot_args,omitempty"`
}

// Drive is PUT /drives/{drive_id}'s body (a virtio-block drive).
type Drive struct {
	DriveID      string `json:"drive_id"`
	PathOnHost   string `json:"path_on_host"`
	IsRootDevice bool   `json:"is_root_device"`
	IsReadOnly   bool   `json:"is_read_only"`
	// CacheType is "Unsafe" (the default) or "Writeback".
	CacheType string `json:"cache_type,omitempty"`
}

// Vsock is PUT /vsock's body. Firecracker listens on UDSPath for
// host-initiated connections (Dial) and connects to UDSPath_<port> for the
// guest's.
type Vsock struct {
	// GuestCID is ≥ 3.
	GuestCID uint32 `json:"guest_cid"`
	UDSPath  string `json:"uds_path"`
}

// NetworkInterface is PUT /network-interfaces/{iface_id}'s body: a
// virtio-net device backed by the host's tap device HostDevName.
type NetworkInterface struct {
	IfaceID     string `json:"iface_id"`
	HostDevName string `json:"host_dev_name"`
	GuestMAC    string `json:"guest_mac,omitempty"`
}

// Action types of PUT /actions.
const (
	ActionInstanceStart  = "InstanceStart"
	ActionSendCtrlAltDel = "SendCtrlAltDel"
)

type instanceAction struct {
	ActionType string `json:"action_type"`
}

// VM states of PATCH /vm.
const (
	StatePaused  = "Paused"
	StateResumed = "Resumed"
)

type vmState struct {
	State string `json:"state"`
}

// Instance states GET / reports.
const (
	InstanceNotStarted = "Not started"
	InstanceRunning    = "Running"
	InstancePaused     = "Paused"
)

// InstanceInfo is GET /'s answer.
type InstanceInfo struct {
	AppName    string `json:"app_name"`
	ID         string `json:"id"`
	State      string `json:"state"`
	VMMVersion string `json:"vmm_version"`
}

// Snapshot types of PUT /snapshot/create.
const (
	SnapshotFull = "Full"
	SnapshotDiff = "Diff"
)

// SnapshotCreate is PUT /snapshot/create's body. Firecracker takes it only
// while the VM is paused.
type SnapshotCreate struct {
	SnapshotType string `json:"snapshot_type,omitempty"`
	SnapshotPath string `json:"snapshot_path"`
	MemFilePath  string `json:"mem_file_path"`
}

// MemoryBackend is SnapshotLoad's memory source.
type MemoryBackend struct {
	// BackendType is "File" or "Uffd".
	BackendType string `json:"backend_type"`
	BackendPath string `json:"backend_path"`
}

// SnapshotLoad is PUT /snapshot/load's body. Firecracker takes it only in a
// fresh process, before any other configuration.
type SnapshotLoad struct {
	SnapshotPath string `json:"snapshot_path"`
	// MemBackend is the memory file (the spec's mem_file_path is
	// deprecated; exactly one of the two is allowed).
	MemBackend *MemoryBackend `json:"mem_backend,omitempty"`
	ResumeVM   bool           `json:"resume_vm,omitempty"`
	// VsockOverride binds the restored VM's vsock socket at another path
	// than the snapshot recorded (the parked VM's run dir is gone).
	VsockOverride *VsockOverride `json:"vsock_override,omitempty"`
}

// VsockOverride is SnapshotLoad's vsock_override.
type VsockOverride struct {
	UDSPath string `json:"uds_path"`
}

// apiFault is the spec's Error definition.
type apiFault struct {
	FaultMessage string `json:"fault_message"`
}
