// Visitor from lambdas: std::visit(Overloaded{[](const A&) {...}, [](const B&) {...}}, v).
#pragma once

namespace voltlock {

template <typename... Ts>
struct Overloaded : Ts... {
    using Ts::operator()...;
};
// Spelled out for compilers without C++20's aggregate deduction (clang 14).
template <typename... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace voltlock
