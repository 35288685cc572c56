// One description of a layout, four uses. A type's layout is a function template
//
//     template <typename Io, MaybeConst<T> R> bool fields(Io& io, R& value)
//
// that names the fields in the order they are stored (`io.u64(value.op) && io.str<uint16_t>(...)`).
// Run on a Writer it appends them, on a Counter it measures them, on a Hasher it digests them
// (R const), and on a Reader it reads and checks them (R mutable). Every call answers whether it
// succeeded; only a Reader, or a Writer out of room, ever answers no.
//
// `fields` lives in the namespace of its type: sequences and optionals find an item's layout by
// argument-dependent lookup. A format with more than these primitives (message.cpp's header
// slots, the lock machine's maps) wraps a sink in a class of its own that adds them, and walks
// its own nested records, so that they see the wrapper.
//
// The formats under it, everywhere in the core: integers little-endian and fixed width (wire.h
// asserts a little-endian host, so they are copied in place); a bool is one byte, 0 or 1; an enum
// one byte that must be one of its values; a string or sequence carries its length or count first,
// at the width the format gives it. Readers never trust a length: every read is bounded by the
// bytes left, and a count allocates nothing until its items decode.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "voltlock/wire.h"

namespace voltlock::codec {

// R is T, or const T when the layout is written, measured or hashed.
template <typename R, typename T>
concept MaybeConst = std::same_as<std::remove_const_t<R>, T>;

// Why a Reader stopped.
enum class ReadError : uint8_t {
    truncated,  // a field runs past the end
    bad_enum,   // an enum or bool out of range
    bad_flags,  // flag bits the layout does not define
};

// The item of an optional field or of a sequence: a u32, a u64, or a record with a layout of
// its own.
template <typename Io, typename T>
bool value(Io& io, T& field)
{
    if constexpr (std::same_as<std::remove_const_t<T>, uint64_t>)
        return io.u64(field);
    else if constexpr (std::same_as<std::remove_const_t<T>, uint32_t>)
        return io.u32(field);
    else
        return fields(io, field);
}

// What the three sinks do alike, on top of their own integers and bytes: a bool, an enum and
// flags are one byte, an implied field none; a string or sequence is its length or count, then
// its bytes or items.
template <typename Sink>
class SinkBase {
public:
    bool u8(uint8_t v) { return self().integer(v); }
    bool u16(uint16_t v) { return self().integer(v); }
    bool u32(uint32_t v) { return self().integer(v); }
    bool u64(uint64_t v) { return self().integer(v); }
    bool boolean(bool v) { return u8(v ? 1 : 0); }
    template <typename E>
    bool enumeration(E v, bool (*)(E))
    {
        return u8(static_cast<uint8_t>(v));
    }
    bool flags(uint8_t v, uint8_t) { return u8(v); }
    // A field another field carries (a flag bit): nothing of its own.
    template <typename T>
    bool implied(const T&, const T&)
    {
        return true;
    }
    template <std::unsigned_integral Length>
    bool str(std::string_view s)
    {
        return self().integer(static_cast<Length>(s.size())) && self().bytes(s);
    }
    bool rest(std::string_view s) { return self().bytes(s); }
    // Bytes of a size the layout fixes (a hash): no length.
    template <size_t N>
    bool fixed_bytes(const std::array<uint8_t, N>& a)
    {
        return self().bytes(std::string_view(reinterpret_cast<const char*>(a.data()), N));
    }
    template <std::unsigned_integral Count, typename Sequence>
    bool sequence(const Sequence& items)
    {
        return self().integer(static_cast<Count>(items.size())) && this->items(items, 0);
    }
    // A sequence of strings: a count, then each string with its length.
    template <std::unsigned_integral Count, std::unsigned_integral Length, typename Strings>
    bool strings(const Strings& items)
    {
        if (!self().integer(static_cast<Count>(items.size()))) return false;
        for (const auto& item : items)
            if (!self().template str<Length>(item)) return false;
        return true;
    }
    template <typename T>
    bool optional(const std::optional<T>& field, bool)
    {
        return !field || value(self(), *field);
    }
    // A sequence whose count another field carries.
    template <typename Sequence>
    bool items(const Sequence& items, size_t)
    {
        for (const auto& item : items)
            if (!value(self(), item)) return false;
        return true;
    }

private:
    Sink& self() { return static_cast<Sink&>(*this); }
};

// Appends fields into a buffer of a known size (measure with a Counter first); refuses anything
// that does not fit it, or a string or sequence longer than its length field, and remembers it.
class Writer : public SinkBase<Writer> {
public:
    explicit Writer(std::span<uint8_t> out) : out_(out) {}
    explicit Writer(std::string& out)
        : out_(reinterpret_cast<uint8_t*>(out.data()), out.size())
    {
    }

    template <std::unsigned_integral Length>
    bool str(std::string_view s)
    {
        return fits<Length>(s.size()) && SinkBase::str<Length>(s);
    }
    template <std::unsigned_integral Count, typename Sequence>
    bool sequence(const Sequence& items)
    {
        return fits<Count>(items.size()) && SinkBase::sequence<Count>(items);
    }
    template <std::unsigned_integral Count, std::unsigned_integral Length, typename Strings>
    bool strings(const Strings& items)
    {
        return fits<Count>(items.size()) && SinkBase::strings<Count, Length>(items);
    }

    template <std::unsigned_integral T>
    bool integer(T v)
    {
        return put(&v, sizeof v);
    }
    bool bytes(std::string_view s) { return put(s.data(), s.size()); }
    bool ok() const { return ok_; }
    size_t size() const { return size_; }

private:
    template <std::unsigned_integral Length>
    bool fits(size_t n)
    {
        return n <= std::numeric_limits<Length>::max() || fail();
    }
    bool put(const void* p, size_t n)
    {
        if (!ok_ || n > out_.size() - size_) return fail();
        if (n > 0) std::memcpy(out_.data() + size_, p, n);
        size_ += n;
        return true;
    }
    bool fail()
    {
        ok_ = false;
        return false;
    }

    std::span<uint8_t> out_;
    size_t size_ = 0;
    bool ok_ = true;
};

// Counts the bytes a Writer would append; strings of any length.
class Counter : public SinkBase<Counter> {
public:
    template <std::unsigned_integral T>
    bool integer(T)
    {
        size_ += sizeof(T);
        return true;
    }
    bool bytes(std::string_view s)
    {
        size_ += s.size();
        return true;
    }
    size_t size() const { return size_; }

private:
    size_t size_ = 0;
};

// Digests the fields word by word with the wire checksum's mixing step: every integer (bools,
// enums, lengths and counts too) one word, the bytes of a string their checksum.
class Hasher : public SinkBase<Hasher> {
public:
    template <std::unsigned_integral T>
    bool integer(T v)
    {
        state_ = vl_checksum_mix(state_, v);
        return true;
    }
    bool bytes(std::string_view s)
    {
        return integer(vl_checksum(reinterpret_cast<const uint8_t*>(s.data()),
                                   static_cast<uint32_t>(s.size())));
    }
    uint64_t digest() const { return vl_checksum_final(state_, 0); }

private:
    uint64_t state_ = VL_CHECKSUM_SEED;
};

// Reads what a Writer appends, and accepts nothing else; the first failure is remembered with
// its reason, and nothing after it is read.
class Reader {
public:
    explicit Reader(std::span<const uint8_t> in) : in_(in) {}
    explicit Reader(std::string_view in)
        : in_(reinterpret_cast<const uint8_t*>(in.data()), in.size())
    {
    }

    bool u8(uint8_t& v) { return get(&v, sizeof v); }
    bool u16(uint16_t& v) { return get(&v, sizeof v); }
    bool u32(uint32_t& v) { return get(&v, sizeof v); }
    bool u64(uint64_t& v) { return get(&v, sizeof v); }
    bool boolean(bool& v)
    {
        uint8_t x = 0;
        if (!u8(x)) return false;
        if (x > 1) return fail(ReadError::bad_enum);
        v = x == 1;
        return true;
    }
    // `known(E)`: whether a value is one of the enum's (the enums have uint8_t underneath, so
    // the cast is defined for any byte).
    template <typename E>
    bool enumeration(E& v, bool (*known)(E))
    {
        uint8_t x = 0;
        if (!u8(x)) return false;
        v = static_cast<E>(x);
        return known(v) || fail(ReadError::bad_enum);
    }
    bool flags(uint8_t& v, uint8_t allowed)
    {
        if (!u8(v)) return false;
        return (v & ~allowed) == 0 || fail(ReadError::bad_flags);
    }
    template <typename T>
    bool implied(T& field, const T& carried)
    {
        field = carried;
        return true;
    }
    template <std::unsigned_integral Length>
    bool str(std::string& s)
    {
        Length length = 0;
        return get(&length, sizeof length) && bytes(s, length);
    }
    // A string left where it is in the input, not copied: valid while the input is.
    template <std::unsigned_integral Length>
    bool str(std::string_view& s)
    {
        Length length = 0;
        if (!get(&length, sizeof length)) return false;
        if (length > remaining()) return fail(ReadError::truncated);
        s = std::string_view(reinterpret_cast<const char*>(in_.data() + pos_), length);
        pos_ += length;
        return true;
    }
    bool rest(std::string& s) { return bytes(s, remaining()); }
    template <size_t N>
    bool fixed_bytes(std::array<uint8_t, N>& a)
    {
        return get(a.data(), N);
    }
    template <std::unsigned_integral Count, typename Sequence>
    bool sequence(Sequence& items)
    {
        Count count = 0;
        if (!get(&count, sizeof count)) return false;
        for (Count i = 0; i < count; i++)
            if (!fields(*this, items.emplace_back())) return false;
        return true;
    }
    template <std::unsigned_integral Count, std::unsigned_integral Length, typename Strings>
    bool strings(Strings& items)
    {
        Count count = 0;
        if (!get(&count, sizeof count)) return false;
        for (Count i = 0; i < count; i++)
            if (!str<Length>(items.emplace_back())) return false;
        return true;
    }
    template <typename T>
    bool optional(std::optional<T>& field, bool present)
    {
        return !present || value(*this, field.emplace());
    }
    // Items are added as they decode, so a count beyond the bytes allocates nothing for itself.
    template <typename Sequence>
    bool items(Sequence& items, size_t count)
    {
        for (size_t i = 0; i < count; i++)
            if (!value(*this, items.emplace_back())) return false;
        return true;
    }

    bool fail(ReadError error)
    {
        if (!error_) error_ = error;
        return false;
    }
    std::optional<ReadError> error() const { return error_; }
    size_t remaining() const { return in_.size() - pos_; }
    bool done() const { return pos_ == in_.size(); }

protected:
    bool get(void* p, size_t n)
    {
        if (error_) return false;
        if (n > remaining()) return fail(ReadError::truncated);
        std::memcpy(p, in_.data() + pos_, n);
        pos_ += n;
        return true;
    }
    bool bytes(std::string& out, size_t n)
    {
        if (error_) return false;
        if (n > remaining()) return fail(ReadError::truncated);
        out.assign(reinterpret_cast<const char*>(in_.data() + pos_), n);
        pos_ += n;
        return true;
    }

private:
    std::span<const uint8_t> in_;
    size_t pos_ = 0;
    std::optional<ReadError> error_;
};

// A default value of the variant's alternative at `index` (< its size): a reader fills in the
// alternative a code read before it names.
template <typename Variant, size_t... I>
Variant alternative(size_t index, std::index_sequence<I...>)
{
    Variant v;
    ((index == I ? (v.template emplace<I>(), 0) : 0), ...);
    return v;
}

template <typename Variant>
Variant alternative(size_t index)
{
    return alternative<Variant>(index, std::make_index_sequence<std::variant_size_v<Variant>>{});
}

// The bytes of `value`'s layout, measured first so that they are allocated once. nullopt if a
// string or sequence is longer than its length field.
template <typename T>
std::optional<std::string> encode(const T& value)
{
    Counter counter;
    fields(counter, value);
    std::string out(counter.size(), '\0');
    Writer writer(out);
    if (!fields(writer, value)) return std::nullopt;
    return out;
}

template <typename T>
size_t encoded_size(const T& value)
{
    Counter counter;
    fields(counter, value);
    return counter.size();
}

template <typename T>
uint64_t digest(const T& value)
{
    Hasher hasher;
    fields(hasher, value);
    return hasher.digest();
}

// `value` read from the whole of `in`; nullopt if it does not parse or bytes are left.
template <typename T>
std::optional<T> decode(std::string_view in)
{
    Reader reader(in);
    T value;
    if (!fields(reader, value) || !reader.done()) return std::nullopt;
    return value;
}

}  // namespace voltlock::codec
