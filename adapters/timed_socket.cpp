#include "adapters/timed_socket.h"

#include <boost/asio/execution_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <mutex>
#include <optional>
#include <vector>

namespace ferry::adapters {

namespace asio = boost::asio;

// One per event loop (an Asio service of its execution context): the list of sockets with a
// deadline, and one timer, armed for the earliest deadline of a socket with an operation
// pending (at most kMaxSweepSleep ahead), and not armed when none is.
class DeadlineSweep : public asio::execution_context::service {
 public:
  using key_type = DeadlineSweep;
  static inline asio::execution_context::id id;
  using Clock = TimedSocket::Clock;

  explicit DeadlineSweep(asio::execution_context& ctx) : service(ctx) {}

  static DeadlineSweep& of(const asio::any_io_executor& ex) {
    return asio::use_service<DeadlineSweep>(asio::query(ex, asio::execution::context));
  }

  // When the timer fires next; Clock::time_point::max() when it is not armed. Read by the
  // loop's sockets as they start operations (on the loop's thread, as are all changes).
  const Clock::time_point* wakes_at() const { return &wakes_at_; }

  void link(TimedSocket* s, const asio::any_io_executor& ex) {
    std::lock_guard lock(mu_);
    if (shut_down_) return;
    s->prev_ = nullptr;
    s->next_ = head_;
    if (head_ != nullptr) head_->prev_ = s;
    head_ = s;
    s->linked_ = true;
    if (!timer_) timer_.emplace(ex);
  }

  void unlink(TimedSocket* s) {
    std::lock_guard lock(mu_);
    if (!s->linked_) return;
    if (s->prev_ != nullptr)
      s->prev_->next_ = s->next_;
    else
      head_ = s->next_;
    if (s->next_ != nullptr) s->next_->prev_ = s->prev_;
    s->prev_ = s->next_ = nullptr;
    s->linked_ = false;
  }

  // Makes the timer fire by `deadline` (or within kMaxSweepSleep).
  void wake_by(Clock::time_point deadline) {
    std::lock_guard lock(mu_);
    arm(std::min(deadline, Clock::now() + TimedSocket::kMaxSweepSleep));
  }

 private:
  void shutdown() override {
    std::lock_guard lock(mu_);
    shut_down_ = true;
    for (TimedSocket* s = head_; s != nullptr;) {
      TimedSocket* next = s->next_;
      s->prev_ = s->next_ = nullptr;
      s->linked_ = false;
      s = next;
    }
    head_ = nullptr;
    timer_.reset();
    wakes_at_ = Clock::time_point::max();
  }

  void arm(Clock::time_point at) {  // mu_ held
    if (shut_down_ || !timer_ || at >= wakes_at_) return;
    wakes_at_ = at;
    // Moving the timer cancels the earlier wait; its handler sees operation_aborted.
    timer_->expires_at(at);
    timer_->async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      sweep();
    });
  }

  void sweep() {
    std::vector<TimedSocket*> due;
    {
      std::lock_guard lock(mu_);
      wakes_at_ = Clock::time_point::max();
      auto now = Clock::now();
      auto next = Clock::time_point::max();
      for (TimedSocket* s = head_; s != nullptr; s = s->next_) {
        if (s->pending_ <= 0) continue;
        if (s->deadline_ <= now) {
          due.push_back(s);
        } else {
          next = std::min(next, s->deadline_);
        }
      }
      if (next != Clock::time_point::max()) arm(std::min(next, now + TimedSocket::kMaxSweepSleep));
    }
    // Sockets are only destroyed on this loop's thread, so the ones found are alive here.
    for (TimedSocket* s : due) s->expire();
  }

  std::mutex mu_;  // sockets of another loop may be destroyed from the shutting-down thread
  TimedSocket* head_ = nullptr;
  std::optional<asio::steady_timer> timer_;
  Clock::time_point wakes_at_ = Clock::time_point::max();
  bool shut_down_ = false;
};

TimedSocket::TimedSocket(const executor_type& executor) : socket_(executor) {}

TimedSocket::TimedSocket(asio::ip::tcp::socket socket) : socket_(std::move(socket)) {}

TimedSocket::~TimedSocket() {
  if (linked_ && sweep_ != nullptr) sweep_->unlink(this);
}

void TimedSocket::expires_at(Clock::time_point deadline) {
  deadline_ = deadline;
  timed_out_ = false;
  if (!linked_) {
    if (sweep_ == nullptr) {
      sweep_ = &DeadlineSweep::of(socket_.get_executor());
      sweep_wakes_at_ = sweep_->wakes_at();
    }
    sweep_->link(this, socket_.get_executor());
  }
  // Moved earlier while an operation is pending.
  if (pending_ > 0 && deadline_ < *sweep_wakes_at_) wake_sweep_by_deadline();
}

void TimedSocket::wake_sweep_by_deadline() {
  if (linked_ && sweep_ != nullptr) sweep_->wake_by(deadline_);
}

void TimedSocket::expires_never() {
  deadline_ = Clock::time_point::max();
  timed_out_ = false;
  if (linked_ && sweep_ != nullptr) sweep_->unlink(this);
}

void TimedSocket::close() noexcept {
  boost::system::error_code ec;
  socket_.close(ec);
}

void TimedSocket::expire() {
  deadline_ = Clock::time_point::max();
  timed_out_ = true;
  if (sweep_ != nullptr) sweep_->unlink(this);
  close();
}

}  // namespace ferry::adapters
