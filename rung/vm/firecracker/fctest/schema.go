package fctest

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// kind is a JSON type of the spec.
type kind int

const (
	kString kind = iota
	kBool
	kInt
	kObject
	kArray
)

func (k kind) String() string {
	return [...]string{"string", "boolean", "integer", "object", "array"}[k]
}

// field is one property of a spec definition.
type field struct {
	kind     kind
	required bool
	enum     []string
	min, max float64 // integers: inclusive bounds when max > 0
	// object: the nested definition, when the fake checks inside it.
	object schema
}

// schema is a spec definition: its properties.
type schema map[string]field

// The definitions of firecracker.yaml the vm rung's requests use, with
// every property the spec lists (so that a field the spec has is not
// refused), required ones marked, enums and integer ranges as the spec
// states them.
var (
	tokenBucket = schema{
		"size":           {kind: kInt, required: true, min: 0, max: math.MaxInt64},
		"one_time_burst": {kind: kInt, min: 0, max: math.MaxInt64},
		"refill_time":    {kind: kInt, required: true, min: 0, max: math.MaxInt64},
	}
	rateLimiter = schema{
		"bandwidth": {kind: kObject, object: tokenBucket},
		"ops":       {kind: kObject, object: tokenBucket},
	}
	machineConfigSchema = schema{
		"vcpu_count":        {kind: kInt, required: true, min: 1, max: 32},
		"mem_size_mib":      {kind: kInt, required: true, min: 1, max: math.MaxInt32},
		"smt":               {kind: kBool},
		"track_dirty_pages": {kind: kBool},
		"cpu_template":      {kind: kString, enum: []string{"C3", "T2", "T2S", "T2CL", "T2A", "V1N1", "None"}},
		"huge_pages":        {kind: kString, enum: []string{"None", "Transparent", "2M"}},
	}
	bootSourceSchema = schema{
		"kernel_image_path": {kind: kString, required: true},
		"initrd_path":       {kind: kString},
		"boot_args":         {kind: kString},
	}
	driveSchema = schema{
		"drive_id":       {kind: kString, required: true},
		"is_root_device": {kind: kBool, required: true},
		"partuuid":       {kind: kString},
		"cache_type":     {kind: kString, enum: []string{"Unsafe", "Writeback"}},
		"is_read_only":   {kind: kBool},
		"path_on_host":   {kind: kString},
		"rate_limiter":   {kind: kObject, object: rateLimiter},
		"io_engine":      {kind: kString, enum: []string{"Sync", "Async"}},
		"socket":         {kind: kString},
	}
	vsockSchema = schema{
		"guest_cid": {kind: kInt, required: true, min: 3, max: math.MaxUint32},
		"uds_path":  {kind: kString, required: true},
		"vsock_id":  {kind: kString},
	}
	netSchema = schema{
		"iface_id":        {kind: kString, required: true},
		"host_dev_name":   {kind: kString, required: true},
		"guest_mac":       {kind: kString},
		"mtu":             {kind: kInt, min: 68, max: 65535},
		"rx_rate_limiter": {kind: kObject, object: rateLimiter},
		"tx_rate_limiter": {kind: kObject, object: rateLimiter},
	}
	actionSchema = schema{
		"action_type": {kind: kString, required: true, enum: []string{"FlushMetrics", "InstanceStart", "SendCtrlAltDel"}},
	}
	vmSchema = schema{
		"state": {kind: kString, required: true, enum: []string{"Paused", "Resumed"}},
	}
	snapshotCreateSchema = schema{
		"mem_file_path": {kind: kString, required: true},
		"snapshot_path": {kind: kString, required: true},
		"snapshot_type": {kind: kString, enum: []string{"Full", "Diff"}},
	}
	memoryBackend = schema{
		"backend_type": {kind: kString, required: true, enum: []string{"File", "Uffd"}},
		"backend_path": {kind: kString, required: true},
	}
	snapshotLoadSchema = schema{
		"snapshot_path":         {kind: kString, required: true},
		"enable_diff_snapshots": {kind: kBool},
		"track_dirty_pages":     {kind: kBool},
		"mem_file_path":         {kind: kString},
		"mem_backend":           {kind: kObject, object: memoryBackend},
		"resume_vm":             {kind: kBool},
		"network_overrides":     {kind: kArray},
		"vsock_override":        {kind: kObject, object: schema{"uds_path": {kind: kString, required: true}}},
		"clock_realtime":        {kind: kBool},
	}
)

// check validates body against s: no property the spec lacks (Firecracker's
// config types refuse unknown fields), every required one present, each of
// its type, enums and ranges kept. The message is worded as serde's
// deserialisation errors are in Firecracker's answers.
func (s schema) check(body map[string]any) error {
	names := make([]string, 0, len(body))
	for k := range body {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		f, ok := s[k]
		if !ok {
			return fmt.Errorf("unknown field `%s`", k)
		}
		if err := f.check(k, body[k]); err != nil {
			return err
		}
	}
	req := make([]string, 0, len(s))
	for k, f := range s {
		if f.required {
			req = append(req, k)
		}
	}
	sort.Strings(req)
	for _, k := range req {
		if _, ok := body[k]; !ok {
			return fmt.Errorf("missing field `%s`", k)
		}
	}
	return nil
}

func (f field) check(name string, v any) error {
	bad := func() error { return fmt.Errorf("invalid type for `%s`: %T, expected %s", name, v, f.kind) }
	switch f.kind {
	case kString:
		s, ok := v.(string)
		if !ok {
			return bad()
		}
		if f.enum != nil && !slices.Contains(f.enum, s) {
			return fmt.Errorf("unknown variant `%s` for `%s`, expected one of %v", s, name, f.enum)
		}
	case kBool:
		if _, ok := v.(bool); !ok {
			return bad()
		}
	case kInt:
		n, ok := v.(float64)
		if !ok || n != math.Trunc(n) {
			return bad()
		}
		if f.max > 0 && (n < f.min || n > f.max) {
			return fmt.Errorf("`%s` %v is out of range [%v, %v]", name, n, f.min, f.max)
		}
	case kObject:
		o, ok := v.(map[string]any)
		if !ok {
			return bad()
		}
		if f.object != nil {
			if err := f.object.check(o); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	case kArray:
		if _, ok := v.([]any); !ok {
			return bad()
		}
	}
	return nil
}
