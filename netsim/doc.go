// Package netsim owns the sandbox's network: a userspace TCP/IP stack
// (gVisor's netstack) on the host side of the boundary, fed by a TUN device
// the guest creates inside the sandbox's network namespace (or by a VM NIC's
// Ethernet frames, whose header it strips and adds: ServeEthernet). Every TCP
// connection, UDP datagram and DNS query the sandbox sends ends here. DNS is
// answered with synthetic addresses that map back to names; HTTP is parsed
// and HTTPS terminated with a per-install CA (package ca); each request is
// answered by a mock (package mock), forwarded for real when an allow rule
// says so, or blocked; everything is logged as dryexec.NetworkEvent.
//
// Host side: New, then ServeTUN (ServeEthernet, or Serve for another packet
// link), then Log
// and Records. The sandbox side (creating the TUN device, handing it over,
// resolv.conf) is package tun, which the guest imports without the netstack.
package netsim
