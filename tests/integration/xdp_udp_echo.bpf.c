// Test program for the rig (test_cell_rig.py): answers UDP datagrams to port 9 from XDP by
// turning them around (swap MACs, IPs, ports) and sending them back with XDP_TX. Swapping
// leaves every checksum valid, so nothing else is rewritten. Used to check DESIGN §6's veth
// fact: the reply arrives only if the bridge-side peer has an XDP program.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define ECHO_PORT 9

SEC("xdp")
int xdp_udp_echo(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP)) return XDP_PASS;
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > data_end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
        return XDP_PASS;
    struct udphdr *udp = (void *)(ip + 1);
    if ((void *)(udp + 1) > data_end || udp->dest != bpf_htons(ECHO_PORT)) return XDP_PASS;

    unsigned char mac[ETH_ALEN];
    __builtin_memcpy(mac, eth->h_source, ETH_ALEN);
    __builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
    __builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
    __be32 addr = ip->saddr;
    ip->saddr = ip->daddr;
    ip->daddr = addr;
    __be16 port = udp->source;
    udp->source = udp->dest;
    udp->dest = port;
    return XDP_TX;
}

char _license[] SEC("license") = "GPL";
