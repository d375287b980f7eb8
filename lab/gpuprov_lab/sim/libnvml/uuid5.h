/* Name-based UUIDs (RFC 4122 version 5, SHA-1), as Python's uuid.uuid5 makes them.
 *
 *   char text[37];
 *   uuid5(namespace_bytes, "GPU-.../1/0", text);   // "xxxxxxxx-xxxx-5xxx-yxxx-xxxxxxxxxxxx"
 */
#ifndef GPUPROV_UUID5_H
#define GPUPROV_UUID5_H

void uuid5(const unsigned char namespace_id[16], const char *name, char text[37]);

#endif
