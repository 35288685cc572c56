# find_package(voltlock): voltlock::voltlock (shared) and voltlock::voltlock_static.
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(nlohmann_json)
find_dependency(PkgConfig)
find_dependency(OpenSSL)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
include(${CMAKE_CURRENT_LIST_DIR}/voltlockTargets.cmake)
