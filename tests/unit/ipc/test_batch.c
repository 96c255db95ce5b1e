/* SPDX-License-Identifier: Apache-2.0 */
/* placeholder: being written */
int main(void);
int main(void) { return 77; }
