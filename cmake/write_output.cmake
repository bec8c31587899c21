# cmake -DCOMMAND=<program;args> -DOUTPUT=<file> -P write_output.cmake
# Runs COMMAND and writes its standard output to OUTPUT; fails (and leaves no OUTPUT) when COMMAND
# fails or prints nothing. The build writes the man page this way (msrun-ssh --man).
execute_process(COMMAND ${COMMAND} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR out STREQUAL "")
  file(REMOVE "${OUTPUT}")
  message(FATAL_ERROR "${COMMAND}: exit status ${rc}, ${OUTPUT} not written")
endif()
file(WRITE "${OUTPUT}" "${out}")
