/* commands.h - the node command's stdin: one command per line, so that tests can drive a
 * long-running C node. */
#ifndef SPEED_COMMANDS_H
#define SPEED_COMMANDS_H

#include "node.h"

/* Makes node_step read commands from fd (the node command's stdin). */
void commands_attach(node_t *n, int fd);

#endif
