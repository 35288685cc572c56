/* Frame layout the Electrode programs accept: Ethernet II, IPv4 without options, UDP, then one
 * replication message (kernel side only). Anything else is not ours and passes untouched.
 */
#ifndef VOLTLOCK_PACKET_BPF_H
#define VOLTLOCK_PACKET_BPF_H

#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>

#include "voltlock/wire.h"

/* Not in the uapi headers. */
#define VL_IP_MF 0x2000
#define VL_IP_OFFSET 0x1FFF

#define VL_ETH_BYTES 14u
#define VL_IPV4_BYTES 20u
#define VL_UDP_BYTES 8u
/* Where the replication message starts in the frame. */
#define VL_PAYLOAD_OFFSET (VL_ETH_BYTES + VL_IPV4_BYTES + VL_UDP_BYTES)
/* A whole PrepareOK frame. */
#define VL_PREPARE_OK_FRAME_BYTES (VL_PAYLOAD_OFFSET + VL_HEADER_BYTES)

/* Offsets of the fields TC egress rewrites per clone. */
#define VL_IP_CHECK_OFFSET (VL_ETH_BYTES + offsetof(struct iphdr, check))
#define VL_IP_DADDR_OFFSET (VL_ETH_BYTES + offsetof(struct iphdr, daddr))
#define VL_UDP_CHECK_OFFSET (VL_ETH_BYTES + VL_IPV4_BYTES + offsetof(struct udphdr, check))
#define VL_UDP_DEST_OFFSET (VL_ETH_BYTES + VL_IPV4_BYTES + offsetof(struct udphdr, dest))

_Static_assert(sizeof(struct ethhdr) == VL_ETH_BYTES, "ethhdr size");
_Static_assert(sizeof(struct iphdr) == VL_IPV4_BYTES, "iphdr size");
_Static_assert(sizeof(struct udphdr) == VL_UDP_BYTES, "udphdr size");

#endif /* VOLTLOCK_PACKET_BPF_H */
