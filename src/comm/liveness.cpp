#include "lft/comm/liveness.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "lft/runtime/check.h"

namespace lft {
namespace {

constexpr int kMaxAddresses = 8;
constexpr std::uint32_t kMagic = 0x4c465450;  // "LFTP"

// What each rank publishes: its UDP port and its IPv4 addresses (network byte order).
struct Endpoint {
  std::uint16_t port = 0;
  std::uint16_t count = 0;
  std::uint32_t addresses[kMaxAddresses] = {};
};

struct Packet {
  std::uint32_t magic = kMagic;
  std::uint32_t pong = 0;
  std::uint64_t token = 0;  // the job's: a process of another job never answers for ours
  std::int32_t from = 0;
  std::int32_t to = 0;
};

struct State {
  std::mutex mutex;
  bool running = false;
  int fd = -1;
  int rank = 0;
  std::uint64_t token = 0;
  std::vector<Endpoint> peers;
  std::vector<std::string> hosts;
  std::atomic<bool> stop{false};
  std::thread responder;
};

State& state() {
  static State s;
  return s;
}

Endpoint local_endpoint(std::uint16_t port) {
  Endpoint e;
  e.port = port;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return e;
  for (ifaddrs* i = list; i != nullptr && e.count < kMaxAddresses; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const auto addr = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    if (ntohl(addr) >> 24 == 127) continue;  // loopback: reached as 127.0.0.1 from the same host
    e.addresses[e.count++] = addr;
  }
  freeifaddrs(list);
  return e;
}

int open_udp_socket() {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  any.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::uint16_t bound_port(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

bool receive(int fd, int timeout_ms, Packet& p, sockaddr_in& from) {
  pollfd pfd{fd, POLLIN, 0};
  if (poll(&pfd, 1, timeout_ms) <= 0) return false;
  socklen_t len = sizeof from;
  const ssize_t n = recvfrom(fd, &p, sizeof p, 0, reinterpret_cast<sockaddr*>(&from), &len);
  return n == static_cast<ssize_t>(sizeof p) && p.magic == kMagic;
}

void respond_loop() {
  State& s = state();
  while (!s.stop.load()) {
    Packet p;
    sockaddr_in from{};
    if (!receive(s.fd, 200, p, from)) continue;
    if (p.pong != 0 || p.token != s.token || p.to != s.rank) continue;
    p.pong = 1;
    std::swap(p.from, p.to);
    sendto(s.fd, &p, sizeof p, 0, reinterpret_cast<sockaddr*>(&from), sizeof from);
  }
}

// Sends a ping to every address `peer` published (and to 127.0.0.1 when it shares our host).
void ping(int fd, const State& s, int peer) {
  const Endpoint& e = s.peers[peer];
  Packet p;
  p.token = s.token;
  p.from = s.rank;
  p.to = peer;
  std::vector<std::uint32_t> targets(e.addresses, e.addresses + e.count);
  if (s.hosts[peer] == s.hosts[s.rank]) targets.push_back(htonl(INADDR_LOOPBACK));
  for (const std::uint32_t a : targets) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = a;
    to.sin_port = htons(e.port);
    sendto(fd, &p, sizeof p, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to), sizeof to);
  }
}

}  // namespace

void Liveness::start(MPI_Comm world, const std::vector<std::string>& hosts) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.running) return;
  int size = 1;
  LFT_MPI_CHECK(MPI_Comm_rank(world, &s.rank));
  LFT_MPI_CHECK(MPI_Comm_size(world, &size));
  s.fd = open_udp_socket();
  // A rank without a socket publishes port 0: it is then never probed, and never reported lost.
  const Endpoint mine = local_endpoint(s.fd < 0 ? 0 : bound_port(s.fd));
  s.peers.assign(size, Endpoint{});
  LFT_MPI_CHECK(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, s.peers.data(), sizeof mine, MPI_BYTE, world));
  if (s.rank == 0) s.token = std::random_device{}() * 0x100000001ull ^ static_cast<std::uint64_t>(getpid());
  LFT_MPI_CHECK(MPI_Bcast(&s.token, 1, MPI_UINT64_T, 0, world));
  s.hosts = hosts;
  s.hosts.resize(size);
  s.running = true;
  s.stop.store(false);
  if (s.fd >= 0) s.responder = std::thread(respond_loop);
}

void Liveness::stop() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.running) return;
  s.stop.store(true);
  if (s.responder.joinable()) s.responder.join();
  if (s.fd >= 0) close(s.fd);
  s.fd = -1;
  s.running = false;
}

bool Liveness::started() { return state().running; }

std::vector<int> Liveness::unanswered(double seconds) {
  const State& s = state();
  std::map<int, bool> waiting;
  for (int r = 0; r < static_cast<int>(s.peers.size()); ++r)
    if (r != s.rank && s.peers[r].port != 0) waiting[r] = true;
  const int fd = open_udp_socket();  // our own: the responder must not eat the answers
  if (fd < 0 || waiting.empty()) {
    if (fd >= 0) close(fd);
    return {};
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  auto next_round = Clock::now();
  while (!waiting.empty() && Clock::now() < deadline) {
    if (Clock::now() >= next_round) {  // resend every 0.5 s: UDP may drop a datagram
      for (const auto& [r, _] : waiting) ping(fd, s, r);
      next_round = Clock::now() + std::chrono::milliseconds(500);
    }
    Packet p;
    sockaddr_in from{};
    if (receive(fd, 50, p, from) && p.pong == 1 && p.token == s.token && p.to == s.rank)
      waiting.erase(p.from);
  }
  close(fd);
  std::vector<int> lost;
  for (const auto& [r, _] : waiting) lost.push_back(r);
  return lost;
}

std::string ranks_by_host(const std::vector<int>& ranks, const std::vector<std::string>& hosts) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> by_host;
  for (const int r : ranks) {
    const std::string& h = r < static_cast<int>(hosts.size()) ? hosts[r] : "?";
    if (by_host[h].empty()) order.push_back(h);
    by_host[h].push_back(r);
  }
  std::string out;
  for (const auto& h : order) {
    const auto& rs = by_host[h];
    out += out.empty() ? "" : "; ";
    out += rs.size() == 1 ? "rank " : "ranks ";
    for (std::size_t i = 0; i < rs.size(); ++i) out += (i ? ", " : "") + std::to_string(rs[i]);
    out += " on " + h;
  }
  return out;
}

std::string Liveness::report(double seconds) {
  if (!started()) return "";
  const std::vector<int> lost = unanswered(seconds);
  char limit[32];
  std::snprintf(limit, sizeof limit, "%g", seconds);
  if (lost.empty())
    return std::string("Every other rank answers a liveness probe (") + limit +
           " s): they are alive but did not join this collective (a different code path), or the "
           "network carries the probes but not MPI's traffic.";
  return "Lost " + ranks_by_host(lost, state().hosts) + ": no answer to a liveness probe within " +
         limit + " s (the process died or is frozen, or its host is cut off).";
}

}  // namespace lft
