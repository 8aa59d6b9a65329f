package acurast

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"slices"
)

// Call indices (acurast.md §2.4: runtime pallet_index(43) AcurastMarketplace, call_index(11) deploy).
const (
	palletMarketplace = 43
	callDeploy        = 11
)

// scale is a minimal SCALE encoder for the types of the deploy call.
type scale []byte

func (s scale) u8(v uint8) scale   { return append(s, v) }
func (s scale) u32(v uint32) scale { return binary.LittleEndian.AppendUint32(s, v) }
func (s scale) u64(v uint64) scale { return binary.LittleEndian.AppendUint64(s, v) }
func (s scale) boolean(v bool) scale {
	if v {
		return append(s, 1)
	}
	return append(s, 0)
}

// u128 encodes a non-negative integer below 2^128, little-endian.
func (s scale) u128(v *big.Int) scale {
	b := v.FillBytes(make([]byte, 16))
	slices.Reverse(b)
	return append(s, b...)
}

// compact is SCALE's compact integer (modes for < 2^30 and the big-integer mode).
func (s scale) compact(v uint64) scale {
	switch {
	case v < 1<<6:
		return append(s, byte(v<<2))
	case v < 1<<14:
		return binary.LittleEndian.AppendUint16(s, uint16(v<<2|1))
	case v < 1<<30:
		return binary.LittleEndian.AppendUint32(s, uint32(v<<2|2))
	}
	var b []byte
	for x := v; x > 0; x >>= 8 {
		b = append(b, byte(x))
	}
	s = append(s, byte((len(b)-4)<<2|3))
	return append(s, b...)
}

func (s scale) bytes(b []byte) scale { return append(s.compact(uint64(len(b))), b...) }

var jobModules = map[string]uint8{"DataEncryption": 0, "LLM": 1, "Shell": 2}
var runtimes = map[string]uint8{"NodeJS": 0, "NodeJSWithBundle": 1, "Shell": 2}

// benchmark pool IDs (acurast.md §5.1; @acurast/sdk benchmark-pool-ids.js).
var poolIDs = map[string]struct{ cpuSingle, cpuMulti, ramTotal uint8 }{
	"mainnet": {1, 2, 3},
	"canary":  {1, 2, 3},
}

// EncodeDeployCall returns the SCALE call bytes of AcurastMarketplace.deploy for a project whose StartAt is an
// absolute timestamp, following the SDK's convertConfigToJob mapping (acurast.md §1.3) and the on-chain
// layouts (§2.4). The script must be "ipfs://" + a CIDv0 (53 bytes).
func EncodeDeployCall(p ProjectConfig) ([]byte, error) {
	if p.StartAt.Timestamp == nil {
		return nil, errors.New("acurast: encode deploy: startAt must be an absolute timestamp")
	}
	if len(p.FileURL) != 53 || p.FileURL[:7] != "ipfs://" {
		return nil, fmt.Errorf("acurast: encode deploy: script %q is not ipfs://<CIDv0> (53 bytes)", p.FileURL)
	}
	if p.Execution.Type != "onetime" || p.Execution.MaxExecutionTimeInMs <= 0 {
		return nil, fmt.Errorf("acurast: encode deploy: execution %+v: only onetime with a positive duration", p.Execution)
	}
	if p.NumberOfReplicas < 1 || p.NumberOfReplicas > 64 {
		return nil, fmt.Errorf("acurast: encode deploy: %d replicas, want 1..64", p.NumberOfReplicas)
	}
	for _, l := range []int64{p.UsageLimit.MaxMemory, p.UsageLimit.MaxNetworkRequests, p.UsageLimit.MaxStorage} {
		if l < 0 || l > 1<<32-1 {
			return nil, fmt.Errorf("acurast: encode deploy: usage limit %d does not fit u32", l)
		}
	}
	start := *p.StartAt.Timestamp
	dur := p.Execution.MaxExecutionTimeInMs
	end := start + dur + 1
	s := scale{palletMarketplace, callDeploy}

	// registration: JobRegistration
	s = s.bytes([]byte(p.FileURL))
	if len(p.ProcessorWhitelist) == 0 {
		s = s.u8(0)
	} else {
		s = s.u8(1).compact(uint64(len(p.ProcessorWhitelist)))
		for _, a := range p.ProcessorWhitelist {
			id, err := DecodeSS58(a)
			if err != nil {
				return nil, err
			}
			s = append(s, id[:]...)
		}
	}
	s = s.boolean(p.OnlyAttestedDevices)
	s = s.u64(uint64(dur)).u64(uint64(start)).u64(uint64(end)).u64(uint64(end - start)).u64(uint64(p.MaxAllowedStartDelayInMs))
	s = s.u32(uint32(p.UsageLimit.MaxMemory)).u32(uint32(p.UsageLimit.MaxNetworkRequests)).u32(uint32(p.UsageLimit.MaxStorage))
	s = s.compact(uint64(len(p.RequiredModules)))
	for _, m := range p.RequiredModules {
		i, ok := jobModules[m]
		if !ok {
			return nil, fmt.Errorf("acurast: encode deploy: unknown module %q", m)
		}
		s = s.u8(i)
	}
	// extra.requirements
	switch p.AssignmentStrategy.Type {
	case "Single":
		s = s.u8(0).u8(0) // Single(None): no instant match
	case "Competing":
		s = s.u8(1)
	default:
		return nil, fmt.Errorf("acurast: encode deploy: assignment strategy %q", p.AssignmentStrategy.Type)
	}
	s = s.u8(uint8(p.NumberOfReplicas))
	if p.MaxCostPerExecution < 0 {
		return nil, errors.New("acurast: encode deploy: negative reward")
	}
	s = s.u128(big.NewInt(p.MaxCostPerExecution))
	if p.MinProcessorReputation > 0 { // the SDK sends None for 0
		s = s.u8(1).u128(big.NewInt(p.MinProcessorReputation))
	} else {
		s = s.u8(0)
	}
	if v := p.MinProcessorVersions; v != nil && v.Android > 0 {
		s = s.u8(1).u8(0).compact(1).u32(0).u32(uint32(v.Android)) // Some(Min([{platform: Android=0, build}]))
	} else {
		s = s.u8(0)
	}
	rt, ok := runtimes[p.Runtime]
	if !ok {
		return nil, fmt.Errorf("acurast: encode deploy: runtime %q", p.Runtime)
	}
	s = s.u8(rt)
	// mutability, reuse_keys_from
	switch p.Mutability {
	case "", "Immutable":
		s = s.u8(0)
	case "Mutable":
		s = s.u8(1).u8(0) // Mutable(None)
	default:
		return nil, fmt.Errorf("acurast: encode deploy: mutability %q", p.Mutability)
	}
	s = s.u8(0)
	// min_metrics: Some(Vec<(pool, numerator, 1)>) in the SDK's order (ram, single core, multi core).
	pools, ok := poolIDs[p.Network]
	if !ok {
		return nil, fmt.Errorf("acurast: encode deploy: network %q", p.Network)
	}
	type metric struct {
		pool uint8
		v    int64
	}
	var ms []metric
	if f := p.BenchmarkFilters; f != nil {
		if f.MinRamTotalBytes > 0 {
			ms = append(ms, metric{pools.ramTotal, f.MinRamTotalBytes})
		}
		if f.MinCpuSingleCoreScore > 0 {
			ms = append(ms, metric{pools.cpuSingle, f.MinCpuSingleCoreScore})
		}
		if f.MinCpuMultiCoreScore > 0 {
			ms = append(ms, metric{pools.cpuMulti, f.MinCpuMultiCoreScore})
		}
	}
	s = s.u8(1).compact(uint64(len(ms)))
	for _, m := range ms {
		s = s.u8(m.pool).u128(big.NewInt(m.v)).u128(big.NewInt(1))
	}
	return s, nil
}

// EncodeDeployCallHex is EncodeDeployCall as 0x-prefixed hex (polkadot.js' form).
func EncodeDeployCallHex(p ProjectConfig) (string, error) {
	b, err := EncodeDeployCall(p)
	if err != nil {
		return "", err
	}
	return "0x" + hex.EncodeToString(b), nil
}
