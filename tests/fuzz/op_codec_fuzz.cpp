// The op and result decoders (server/core/lock_ops.cpp): every entry payload a replica applies
// and every result the HTTP layer reads goes through them. Properties: no crash on any bytes,
// and the encoding is canonical: what decodes (and, for an op, validates) encodes back to the
// very same bytes, so two replicas can never read one payload two ways.
#include "core/lock_ops.h"
#include "fuzz_check.h"

using namespace voltlock;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string_view bytes = fuzz::as_text(data, size);
    auto op = decode_op(bytes);
    if (op.ok()) {
        FUZZ_REQUIRE(op_code_name(op_code(op.value())) != std::string_view("unknown"));
        if (!validate(op.value())) {
            const Bytes again = encode_op(op.value());
            FUZZ_REQUIRE(again == bytes);
            FUZZ_REQUIRE(encoded_size(op.value()) == again.size());
        }
    }
    auto result = decode_result(bytes);
    if (result.ok()) {
        const Bytes again = encode_result(result.value());
        FUZZ_REQUIRE(again == bytes);
    }
    return 0;
}
