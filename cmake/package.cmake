# What `cmake --install` puts where, and the Debian package made of it (`cpack -G DEB` in the build
# directory): the binary, its man page (written at build time by the binary itself: msrun-ssh --man,
# from the option table that also makes --help), the bash completion, README.md and docs/.
include(GNUInstallDirs)

set(MSRUN_SSH_MAN_PAGE ${PROJECT_BINARY_DIR}/msrun-ssh.1)
add_custom_command(
  OUTPUT ${MSRUN_SSH_MAN_PAGE}
  COMMAND ${CMAKE_COMMAND} "-DCOMMAND=$<TARGET_FILE:msrun-ssh>;--man"
          -DOUTPUT=${MSRUN_SSH_MAN_PAGE} -P ${PROJECT_SOURCE_DIR}/cmake/write_output.cmake
  DEPENDS msrun-ssh ${PROJECT_SOURCE_DIR}/cmake/write_output.cmake
  COMMENT "Writing the man page msrun-ssh.1"
  VERBATIM)
add_custom_target(man_page ALL DEPENDS ${MSRUN_SSH_MAN_PAGE})

set(MSRUN_SSH_DOC_DIR ${CMAKE_INSTALL_DATADIR}/doc/msrun-ssh)
install(FILES ${MSRUN_SSH_MAN_PAGE} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${PROJECT_SOURCE_DIR}/completions/msrun-ssh.bash
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME msrun-ssh)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${MSRUN_SSH_DOC_DIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${MSRUN_SSH_DOC_DIR}/docs
        FILES_MATCHING PATTERN "*.md" PATTERN "*.png")

set(MSRUN_SSH_MAINTAINER "msrun-ssh maintainers <maintainers@users.noreply.a-seed-cd07121f.example>"
    CACHE STRING "The Debian package's Maintainer field")
set(CPACK_PACKAGE_NAME msrun-ssh)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "launch one distributed training job on many hosts over SSH, with msrun's environment")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "msrun-ssh reads a host file, gives every host a node rank and every process a global rank,\n\
starts the scheduler and the workers on every host over SSH with the environment MindSpore's\n\
msrun sets (or torchrun's), brings every line back prefixed, and tears the job down on every\n\
host when a process fails, the user presses Ctrl-C or a host is lost. The hosts need only\n\
an SSH server, a POSIX sh and, for .py scripts, python3.")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${MSRUN_SSH_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Depends: the shared libraries' packages (libssh, hwloc, toml++, fmt, spdlog, libcrypto, libc,
# libstdc++), as dpkg-shlibdeps finds them; nothing else runs on this machine.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # msrun-ssh_<version>_<arch>.deb
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
include(CPack)
