/* sift_cmd.c — `flynn sift` (keypoints and descriptors of images) and `flynn match` (two images' features
 * matched, a RANSAC model, an SVG of the inliers). */
#ifndef FLYNN_CLI_SIFT_CMD_H
#define FLYNN_CLI_SIFT_CMD_H
int flynn_cmd_sift(int argc, char **argv);
int flynn_cmd_match(int argc, char **argv);
#endif
